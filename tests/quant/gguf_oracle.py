#!/usr/bin/env python3
"""gguf-py oracle for tests/quant (label: oracle). Independent of the C++ code under test.

Commands:
  dequant TYPE IN OUT   raw blocks of ggml type TYPE (file IN) -> float32 little-endian (OUT)
  quant TYPE IN OUT     float32 (IN, length multiple of the block size) -> raw blocks (OUT)
  gridhash OUT          FNV-1a 64 of each lookup table, computed from gguf-py's own unpacking
                        (quants.<cls>.init_grid()), one "name count hash" line per table
  fixture DIR OUTDIR    from the dsv4-tiny fixture (DIR), extract DeepSeek FP8/FP4 tensors of the
                        safetensors checkpoint and their counterparts in dsv4-tiny-mxfp4.gguf (F32
                        dequantized / MXFP4 repacked by the fixture's author) as raw files, plus
                        OUTDIR/manifest.txt lines "kind name rows cols"
Exit status 0 on success; any exception propagates (non-zero).
"""
import sys

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def qtype(name: str) -> GGMLQuantizationType:
    return GGMLQuantizationType[name]


def dequant(name: str, src: str, dst: str) -> None:
    t = qtype(name)
    block_elems, block_bytes = GGML_QUANT_SIZES[t]
    raw = np.fromfile(src, dtype=np.uint8)
    assert raw.size % block_bytes == 0, (raw.size, block_bytes)
    rows = raw.reshape((-1, block_bytes))
    with np.errstate(all="ignore"):
        out = quants.dequantize(rows, t)
    np.asarray(out, dtype=np.float32).reshape(-1).astype("<f4").tofile(dst)


def quant(name: str, src: str, dst: str) -> None:
    t = qtype(name)
    block_elems, _ = GGML_QUANT_SIZES[t]
    x = np.fromfile(src, dtype="<f4")
    assert x.size % block_elems == 0
    out = quants.quantize(x.reshape((-1, block_elems)), t)
    np.ascontiguousarray(out).view(np.uint8).reshape(-1).tofile(dst)


def grid_bytes(cls) -> tuple[int, bytes]:
    cls.init_grid()
    g = np.asarray(cls.grid).reshape(cls.grid_shape)  # float32 values of each element
    b = np.rint(g).astype(np.int64) & 0xFF
    return cls.grid_shape[0], bytes(b.astype(np.uint8).reshape(-1).tolist())


def gridhash(dst: str) -> None:
    lines = []
    ks = bytes(quants.IQ2_XXS.ksigns)
    lines.append(f"ksigns_iq2xs {len(ks)} {fnv1a64(ks):016x}")
    kv = bytes([v & 0xFF for v in quants.MXFP4.kvalues])
    lines.append(f"kvalues_mxfp4_u8 {len(kv)} {fnv1a64(kv):016x}")
    for cls, name in ((quants.IQ2_XXS, "iq2xxs_grid"), (quants.IQ2_XS, "iq2xs_grid"),
                      (quants.IQ2_S, "iq2s_grid"), (quants.IQ1_S, "iq1s_grid")):
        n, data = grid_bytes(cls)
        lines.append(f"{name} {n} {fnv1a64(data):016x}")
    # iq1s_grid_gpu (ggml-common.h): per entry a uint32 whose byte k = (g[k]+1) | (g[k+4]+1) << 4.
    cls = quants.IQ1_S
    cls.init_grid()
    g = np.rint(np.asarray(cls.grid).reshape(cls.grid_shape)).astype(np.int64) + 1
    gpu = (g[:, 0:4] | (g[:, 4:8] << 4)).astype(np.uint8)  # 4 bytes per entry, little-endian u32
    lines.append(f"iq1s_grid_gpu {g.shape[0]} {fnv1a64(bytes(gpu.reshape(-1).tolist())):016x}")
    with open(dst, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_safetensors(paths):
    import json
    import struct
    tensors = {}
    for path in paths:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            tensors[name] = (info["dtype"], info["shape"], data[a:b])
    return tensors


def fixture(src: str, out: str) -> None:
    import glob
    import os
    from gguf import GGUFReader
    st = read_safetensors(sorted(glob.glob(os.path.join(src, "model-*.safetensors"))))
    gg = {t.name: t for t in GGUFReader(os.path.join(src, "dsv4-tiny-mxfp4.gguf")).tensors}
    lines = []
    fp8 = [("layers.0.attn.wq_a", "blk.0.attn_q_a.weight"), ("layers.0.attn.wq_b", "blk.0.attn_q_b.weight"),
           ("layers.0.attn.wo_a", "blk.0.attn_output_a.weight"), ("layers.3.attn.wkv", "blk.3.attn_kv.weight")]
    for ds, gname in fp8:
        dtype, shape, w = st[ds + ".weight"]
        sdtype, _, sc = st[ds + ".scale"]
        assert dtype == "F8_E4M3" and sdtype == "F8_E8M0", (dtype, sdtype)
        name = gname.replace(".", "_")
        open(os.path.join(out, name + ".w"), "wb").write(w)
        open(os.path.join(out, name + ".s"), "wb").write(sc)
        open(os.path.join(out, name + ".g"), "wb").write(np.ascontiguousarray(gg[gname].data).tobytes())
        lines.append(f"fp8 {name} {shape[0]} {shape[1]}")
    for layer in (2, 5):
        for wi, gname in (("w1", "ffn_gate_exps"), ("w2", "ffn_down_exps"), ("w3", "ffn_up_exps")):
            g = gg[f"blk.{layer}.{gname}.weight"]
            n_exp = int(g.shape[2])
            ws, ss, shape = [], [], None
            for e in range(n_exp):
                dtype, shape, w = st[f"layers.{layer}.ffn.experts.{e}.{wi}.weight"]
                sdtype, _, sc = st[f"layers.{layer}.ffn.experts.{e}.{wi}.scale"]
                assert dtype == "I8" and sdtype == "F8_E8M0", (dtype, sdtype)
                ws.append(w)
                ss.append(sc)
            name = f"blk_{layer}_{gname}"
            open(os.path.join(out, name + ".w"), "wb").write(b"".join(ws))
            open(os.path.join(out, name + ".s"), "wb").write(b"".join(ss))
            open(os.path.join(out, name + ".g"), "wb").write(np.ascontiguousarray(g.data).tobytes())
            lines.append(f"fp4 {name} {n_exp * shape[0]} {2 * shape[1]}")
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> int:
    cmd = sys.argv[1]
    if cmd == "dequant":
        dequant(*sys.argv[2:5])
    elif cmd == "quant":
        quant(*sys.argv[2:5])
    elif cmd == "gridhash":
        gridhash(sys.argv[2])
    elif cmd == "fixture":
        fixture(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
