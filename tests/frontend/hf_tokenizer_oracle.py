#!/usr/bin/env python3
"""Oracle for engine/tokenizer: encodes texts with Hugging Face `tokenizers`, configured like
DeepSeek-V3's tokenizer.json (BPE; pre-tokenizer Sequence of three Split(isolated) regexes, then
ByteLevel without regex; CONTROL/USER_DEFINED tokens as added tokens).

Usage: hf_tokenizer_oracle.py VOCAB_JSON TEXTS_JSON OUT_JSON
VOCAB_JSON: {"tokens": [...], "types": [...], "merges": [...]}; TEXTS_JSON: [str, ...].
Writes [[ids...], ...]. Exits 77 when the `tokenizers` package is not installed (test skipped).
"""
import json
import sys

try:
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers
except ImportError:
    print("hf_tokenizer_oracle: python package 'tokenizers' not installed; skipping", file=sys.stderr)
    sys.exit(77)

# The DeepSeek-V3 pre-tokenizer regexes (llama.cpp src/llama-vocab.cpp, DEEPSEEK3_LLM).
REGEXES = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
]


def main():
    vocab_path, texts_path, out_path = sys.argv[1:4]
    d = json.load(open(vocab_path, encoding="utf-8"))
    vocab = {}
    for i, (t, ty) in enumerate(zip(d["tokens"], d["types"])):
        if ty == 1 and t not in vocab:
            vocab[t] = i
    merges = [tuple(m.split(" ")) for m in d["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in REGEXES]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.add_tokens([AddedToken(t, special=(ty == 3), normalized=False)
                   for t, ty in zip(d["tokens"], d["types"]) if ty in (3, 4)])
    texts = json.load(open(texts_path, encoding="utf-8"))
    json.dump([tk.encode(t, add_special_tokens=False).ids for t in texts], open(out_path, "w"))


if __name__ == "__main__":
    main()
