#!/usr/bin/env python3
"""gguf-py oracle for tests/quant (label: oracle). Independent of the C++ code under test.

Commands:
  dequant TYPE IN OUT   raw blocks of ggml type TYPE (file IN) -> float32 little-endian (OUT)
  quant TYPE IN OUT     float32 (IN, length multiple of the block size) -> raw blocks (OUT)
  gridhash OUT          FNV-1a 64 of each lookup table, computed from gguf-py's own unpacking
                        (quants.<cls>.init_grid()), one "name count hash" line per table
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


def main() -> int:
    cmd = sys.argv[1]
    if cmd == "dequant":
        dequant(*sys.argv[2:5])
    elif cmd == "quant":
        quant(*sys.argv[2:5])
    elif cmd == "gridhash":
        gridhash(sys.argv[2])
    else:
        raise SystemExit(f"unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
