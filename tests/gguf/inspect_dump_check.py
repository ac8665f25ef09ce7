#!/usr/bin/env python3
"""Check `ds4-offload inspect --dump` against gguf-py's dequantizer, bit for bit.

usage: inspect_dump_check.py DS4_OFFLOAD MODEL.gguf SCRATCH_DIR

For the first tensor of every type in MODEL that gguf-py can dequantize (F32, F16, BF16 and the
quantized types), runs `DS4_OFFLOAD inspect MODEL --dump NAME --out FILE` and compares FILE
(little-endian float32, ggml row order) with gguf.quants.dequantize of the raw bytes read by
GGUFReader. Exits 77 when MODEL is missing, 1 on any difference.
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    exe, model, scratch = sys.argv[1:4]
    if not os.path.exists(model):
        print(f"{model}: missing, skipped")
        return 77
    os.makedirs(scratch, exist_ok=True)
    r = GGUFReader(model)
    seen = set()
    failures = 0
    checked = 0
    for t in r.tensors:
        if t.tensor_type in seen or t.tensor_type in (Q.I8, Q.I16, Q.I32, Q.I64, Q.F64, Q.Q8_1):
            continue
        seen.add(t.tensor_type)
        out = os.path.join(scratch, t.name + ".f32")
        subprocess.run([exe, "inspect", model, "--dump", t.name, "--out", out], check=True)
        got = np.fromfile(out, dtype="<f4")
        if t.tensor_type in (Q.F32, Q.F16):
            ref = np.asarray(t.data, dtype=np.float32).ravel()
        else:
            ref = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).ravel()
        same = got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32))
        print(f"{t.name} {t.tensor_type.name} {got.size} floats: {'identical' if same else 'DIFFERENT'}")
        checked += 1
        failures += not same
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
