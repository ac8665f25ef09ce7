#!/usr/bin/env python3
"""fuzz/make_safetensors_seeds.py OUTDIR — seeds of fuzz_safetensors (see fuzz_safetensors.cpp for
the input layout): mode-0 single files (every checkpoint dtype, a two-tensor file with metadata,
near misses: overlap, hole, deep JSON, unknown dtype) and mode-1 folders (a micro DeepSeek-V4
config.json with FP8, FP4, NVFP4, BF16, F32 and I64 tensors under official names, with and
without an index). Written with the standard library only."""
import json
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
SIZES = {"F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4}


def st_file(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes) laid out back to back."""
    header, blob = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def raw(name, header, data):
    h = header.encode()
    put(name, b"\x00" + struct.pack("<Q", len(h)) + h + data)


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def n_of(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def pattern(n, seed):
    return bytes((seed * 37 + i * 11) & 0xFF for i in range(n))


# Mode 0: one file.
put("all-dtypes.st", b"\x00" + st_file([("t_" + d.lower(), d, [2, 3], pattern(6 * s, i)) for i, (d, s) in enumerate(SIZES.items())],
                                       {"format": "pt"}))
raw("overlap.st", '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', bytes(6))
raw("hole.st", '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}', bytes(6))
raw("deep.st", '{"a":' + "[" * 40 + "]" * 40 + "}", b"")
raw("bad-dtype.st", '{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}', bytes(1))
raw("scalar.st", '{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}', struct.pack("<f", 1.0))

# Mode 1: micro DeepSeek-V4 folders.
config = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "bos_token_id": 0, "eos_token_id": 1,
    "hc_eps": 1e-6, "hc_mult": 2, "hc_sinkhorn_iters": 4, "head_dim": 32, "hidden_size": 32, "index_head_dim": 16,
    "index_n_heads": 2, "index_topk": 2, "max_position_embeddings": 64, "moe_intermediate_size": 32,
    "n_routed_experts": 2, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 2,
    "num_experts_per_tok": 1, "num_hidden_layers": 1, "num_hash_layers": 1, "num_key_value_heads": 1,
    "num_nextn_predict_layers": 0, "o_groups": 1, "o_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 16,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-6, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 4.0,
                                           "original_max_position_embeddings": 32, "type": "yarn"},
    "rope_theta": 10000.0, "routed_scaling_factor": 1.5, "scoring_func": "sqrtsoftplus", "sliding_window": 8,
    "swiglu_limit": 10.0, "vocab_size": 8, "compress_rope_theta": 160000.0, "compress_ratios": [0, 0],
}
e8m0 = bytes([127])
fp4 = lambda e: [
    ("layers.0.ffn.experts.%d.w1.weight" % e, "I8", [32, 16], pattern(32 * 16, 5 + e)),
    ("layers.0.ffn.experts.%d.w1.scale" % e, "F8_E8M0", [32, 1], bytes([120 + i % 8 for i in range(32)])),
]
nvfp4 = lambda e: [
    ("layers.0.ffn.experts.%d.w1.weight" % e, "U8", [32, 32], pattern(32 * 32, 6 + e)),
    ("layers.0.ffn.experts.%d.w1.weight_scale" % e, "F8_E4M3", [32, 4], bytes([0x38] * 128)),
    ("layers.0.ffn.experts.%d.w1.weight_scale_2" % e, "F32", [], struct.pack("<f", 2.0 ** -8)),
    ("layers.0.ffn.experts.%d.w1.input_scale" % e, "F32", [], struct.pack("<f", 1.0)),
]
dense = [
    ("embed.weight", "BF16", [8, 32], pattern(8 * 32 * 2, 1)),
    ("layers.0.attn.wq_a.weight", "F8_E4M3", [16, 128], pattern(16 * 128, 2)),
    ("layers.0.attn.wq_a.scale", "F8_E8M0", [1, 1], e8m0),
    ("layers.0.attn_norm.weight", "BF16", [32], pattern(64, 3)),
    ("layers.0.ffn.gate.weight", "BF16", [2, 32], pattern(128, 4)),
    ("layers.0.ffn.gate.tid2eid", "I64", [8, 1], b"".join(struct.pack("<q", i % 2) for i in range(8))),
    ("layers.0.hc_attn_base", "F32", [8], pattern(32, 7)),
]
tensors = dense + fp4(0) + fp4(1)
cfg = json.dumps(config, separators=(",", ":")).encode()
shard = st_file(tensors, {"format": "pt"})
put("folder-single.st", b"\x01" + struct.pack("<H", len(cfg)) + cfg + struct.pack("<H", 0) + shard)
index = json.dumps({"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
                    "weight_map": {t[0]: "model-00001-of-00001.safetensors" for t in tensors}}, separators=(",", ":")).encode()
put("folder-index.st", b"\x01" + struct.pack("<H", len(cfg)) + cfg + struct.pack("<H", len(index)) + index + shard)
nv = dict(config, quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16})
cfg2 = json.dumps(nv, separators=(",", ":")).encode()
put("folder-nvfp4.st", b"\x01" + struct.pack("<H", len(cfg2)) + cfg2 + struct.pack("<H", 0) + st_file(dense + nvfp4(0) + nvfp4(1)))
