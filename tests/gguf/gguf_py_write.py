#!/usr/bin/env python3
"""Write GGUF files with gguf-py's GGUFWriter for the C++ reader to read back.

usage: gguf_py_write.py OUTDIR

Writes, for each case NAME, the GGUF file(s) and NAME.expected: the canonical dump (format in
gguf_py_dump.py, without offsets) computed from the inputs given to the writer, not read back.
Cases: single files with alignment 32 (default), 8, 64 and 4096; a split set (split_max_tensors=3,
default alignment); and 'splitalign', a split set with a custom alignment 64, which gguf-py writes
wrongly (general.alignment in the first shard only, every shard padded to 64): the C++ test
expects our reader to refuse it. Prints one line per case: NAME FILE [FILE ...].

Q8_1 is avoided: gguf-py's GGML_QUANT_SIZES gives it 40 bytes per block (ggml: 36).
"""
import os
import struct
import sys
import zlib

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES


def fmt_scalar(t, x):
    if t in (V.FLOAT32, V.FLOAT64):
        if t == V.FLOAT32:
            x = float(np.float32(x))
        return "f" + struct.pack("<d", float(x)).hex()
    if t == V.BOOL:
        return "1" if x else "0"
    if t == V.STRING:
        b = x.encode("utf-8")
        return b.hex() if b else "-"
    return str(int(x))


# (key, type, value, array element type)
KVS = [
    ("t.u8", V.UINT8, 250, None),
    ("t.i8", V.INT8, -100, None),
    ("t.u16", V.UINT16, 65000, None),
    ("t.i16", V.INT16, -32000, None),
    ("t.u32", V.UINT32, 4000000000, None),
    ("t.i32", V.INT32, -2000000000, None),
    ("t.f32", V.FLOAT32, 0.1, None),
    ("t.bool", V.BOOL, True, None),
    ("t.str", V.STRING, "héllo wörld", None),
    ("t.empty_str", V.STRING, "", None),
    ("t.u64", V.UINT64, 2**63, None),
    ("t.i64", V.INT64, -2**63, None),
    ("t.f64", V.FLOAT64, 1.0 / 3.0, None),
    ("t.arr_u8", V.ARRAY, [0, 1, 255], V.UINT8),
    ("t.arr_i16", V.ARRAY, [-1, 2], V.INT16),
    ("t.arr_u32", V.ARRAY, [7, 8, 9], V.UINT32),
    ("t.arr_i32", V.ARRAY, [-7, 8], V.INT32),
    ("t.arr_f32", V.ARRAY, [1.5, -2.25, 1e-7], V.FLOAT32),
    ("t.arr_bool", V.ARRAY, [True, False, True], V.BOOL),
    ("t.arr_str", V.ARRAY, ["a", "", "tokens with spaces"], V.STRING),
    ("t.arr_u64", V.ARRAY, [2**40], V.UINT64),
    ("t.arr_i64", V.ARRAY, [-2**40], V.INT64),
    ("t.arr_f64", V.ARRAY, [3.14159265358979], V.FLOAT64),
]


def tensors():
    rng = np.random.default_rng(7)
    out = []  # (name, array, raw_dtype or None, ggml type id, ne (ggml order))
    a = rng.standard_normal((3, 16)).astype(np.float32)
    out.append(("tok_embd.weight", a, None, int(Q.F32), [16, 3]))
    out.append(("norm.weight", rng.standard_normal(17).astype(np.float16), None, int(Q.F16), [17]))
    out.append(("tid2eid", rng.integers(0, 16, (3, 4)).astype(np.int32), None, int(Q.I32), [4, 3]))
    out.append(("i8", rng.integers(-128, 127, (2, 5)).astype(np.int8), None, int(Q.I8), [5, 2]))
    out.append(("f64", rng.standard_normal(3), None, int(Q.F64), [3]))
    for name, qt, shape in [("attn_q.weight", Q.Q8_0, (4, 64)), ("ffn_gate_exps.weight", Q.MXFP4, (4, 2, 64)),
                            ("ffn_down_exps.weight", Q.Q2_K, (4, 2, 256)), ("ffn_up_exps.weight", Q.IQ2_XXS, (4, 1, 256)),
                            ("bf16", Q.BF16, (2, 1, 1, 5))]:
        blk, tsz = GGML_QUANT_SIZES[qt]
        byte_shape = shape[:-1] + (shape[-1] // blk * tsz,)
        raw = rng.integers(0, 256, byte_shape).astype(np.uint8)
        out.append((name, raw, qt, int(qt), list(reversed(shape))))
    return out


def expected_lines(shard_kvs, shard_tensors):
    lines = []
    for s, (kvs, ts) in enumerate(zip(shard_kvs, shard_tensors)):
        for key, t, val, et in kvs:
            if t == V.ARRAY:
                vals = ",".join(fmt_scalar(et, x) for x in val) if val else "-"
                lines.append(f"kv {s} {key} ARRAY {et.name} {len(val)} {vals}")
            else:
                lines.append(f"kv {s} {key} {t.name} {fmt_scalar(t, val)}")
        for name, arr, _, tid, ne in ts:
            b = arr.tobytes()
            lines.append(f"tensor {name} {tid} {','.join(map(str, ne))} {len(b)} {zlib.crc32(b) & 0xFFFFFFFF:08x}")
    return lines


def write_case(outdir, name, alignment, split_max):
    path = os.path.join(outdir, name + ".gguf")
    w = GGUFWriter(path, "test", split_max_tensors=split_max)
    kvs = [("general.architecture", V.STRING, "test", None)]
    if alignment is not None:
        w.add_custom_alignment(alignment)
        kvs.append(("general.alignment", V.UINT32, alignment, None))
    for key, t, val, et in KVS:
        w.add_key_value(key, val, t, sub_type=et)
        kvs.append((key, t, val, et))
    ts = tensors()
    for tname, arr, raw, _, _ in ts:
        w.add_tensor(tname, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max:
        n = (len(ts) + split_max - 1) // split_max
        files = [os.path.join(outdir, f"{name}-{i + 1:05d}-of-{n:05d}.gguf") for i in range(n)]
        split = lambda i: [("split.no", V.UINT16, i, None), ("split.count", V.UINT16, n, None),
                           ("split.tensors.count", V.INT32, len(ts), None)]
        shard_kvs = [kvs + split(0)] + [split(i) for i in range(1, n)]
        shard_ts = [ts[i * split_max:(i + 1) * split_max] for i in range(n)]
    else:
        files = [path]
        shard_kvs, shard_ts = [kvs], [ts]
    with open(os.path.join(outdir, name + ".expected"), "w") as f:
        f.write("\n".join(expected_lines(shard_kvs, shard_ts)) + "\n")
    print(name, *files)


def main():
    outdir = sys.argv[1]
    write_case(outdir, "align32", None, 0)
    write_case(outdir, "align8", 8, 0)
    write_case(outdir, "align64", 64, 0)
    write_case(outdir, "align4096", 4096, 0)
    write_case(outdir, "split", None, 3)
    write_case(outdir, "splitalign", 64, 3)


if __name__ == "__main__":
    main()
