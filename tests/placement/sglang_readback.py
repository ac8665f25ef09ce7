"""Reads SGLang --init-expert-location JSON files back the way SGLang does
(sgl-project/sglang python/sglang/srt/eplb/expert_location.py: json.loads, "logical_count" as an
array, a 2-D [layers, experts] matrix read as one window) and checks them against the model's
block_count / expert_count / expert_used_count read with gguf-py.

usage: sglang_readback.py MODEL.gguf CALIBRATE.json RUN.json RUN_DECODE_TOKENS
"""
import json
import sys

import numpy as np
from gguf import GGUFReader


def field(r, key):
    f = r.fields[key]
    return int(f.parts[f.data[0]][0])


def main():
    model, cal, run, n_decode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    r = GGUFReader(model)
    layers = field(r, "deepseek4.block_count")
    experts = field(r, "deepseek4.expert_count")
    top_k = field(r, "deepseek4.expert_used_count")
    for path in (cal, run):
        d = json.loads(open(path).read())
        assert "logical_count" in d, f"{path}: no logical_count key ({list(d)})"
        c = np.array(d["logical_count"])
        if c.ndim == 2:
            c = c[None, :]
        assert c.shape[-2:] == (layers, experts), f"{path}: shape {c.shape}, expected (..., {layers}, {experts})"
        assert c.dtype.kind == "i" and (c >= 0).all(), f"{path}: counts must be non-negative integers"
        sums = c[0].sum(axis=1)
        assert (sums == sums[0]).all() and sums[0] % top_k == 0, f"{path}: layer sums {sums} not tokens x top_k"
        print(f"{path}: logical_count {c.shape}, {sums[0] // top_k} tokens per layer, top_k {top_k}: OK")
        if path == run:
            assert sums[0] // top_k == n_decode, f"{path}: {sums[0] // top_k} decode tokens, expected {n_decode}"
    return 0


if __name__ == "__main__":
    sys.exit(main())
