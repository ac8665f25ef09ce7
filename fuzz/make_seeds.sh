#!/usr/bin/env bash
# fuzz/make_seeds.sh — regenerates the committed seed corpus (fuzz/corpus/*) with a built
# ds4-offload: a micro deepseek4 GGUF (make-tiny, 124 KB), the JSON inputs of the placement readers
# (first byte selects the reader, see fuzz_json.cpp), tokenizer and chat texts, and the safetensors
# files and micro checkpoint folders of fuzz_safetensors (make_safetensors_seeds.py).
# Usage: fuzz/make_seeds.sh build/engine/ds4-offload
set -euo pipefail
exe=$(realpath "$1")
cd "$(dirname "$0")"
c=corpus
mkdir -p $c/gguf $c/json $c/tokenizer $c/chat
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" make-tiny --config micro-model.json -o $c/gguf/micro-q8_0.gguf --experts q8_0 --seed 1 2>/dev/null
"$exe" make-tiny --config micro-model.json -o $c/gguf/micro-mxfp4.gguf --experts mxfp4 --seed 2 2>/dev/null
"$exe" make-tiny -o "$tmp/tiny.gguf" --experts q8_0 2>/dev/null
sel() { printf "\\x$(printf %02x "$1")"; cat "$2"; }
sel 0 ../configs/hw/devbox-2c-24g-nogpu.json > $c/json/hw-devbox.json
sel 0 ../configs/hw/4x2080ti-22g-pcie3-2s.json > $c/json/hw-4x2080ti.json
printf 'the baker sells bread\nthe fisher sells fish\n' > "$tmp/p.txt"
"$exe" calibrate -m "$tmp/tiny.gguf" --prompts "$tmp/p.txt" -o "$tmp/stats.json" --max-routes 4 2>/dev/null
sel 1 "$tmp/stats.json" > $c/json/stats-tiny.json
"$exe" plan -m "$tmp/tiny.gguf" --hw ../configs/hw/1x2080ti-22g-pcie3.json --json "$tmp/plan.json" 2>/dev/null
sel 2 "$tmp/plan.json" > $c/json/plan-tiny.json
sel 3 ../configs/models/dsv4-flash.json > $c/json/model-flash.json
printf '\x01Hello, world! The baker sells bread.' > $c/tokenizer/plain.txt
printf '\x03<\xef\xbd\x9cUser\xef\xbd\x9c>caf\xc3\xa9 \xe2\x80\x94 123 4567\n\t<think>x</think>' > $c/tokenizer/special.txt
printf '\x00\xff\xfe bad utf8 \xc3 \xe2\x82' > $c/tokenizer/invalid-utf8.txt
printf '\x02\x00You are terse.\x00\x01\x00What does the baker sell?\x00\x02why\x00Bread.\x00\x01\x00And the fisher?' > $c/chat/turns.bin
printf '\x01\x01\x00Think first.' > $c/chat/think.bin
python3 make_safetensors_seeds.py $c/safetensors
echo "seeds: $(find $c -type f | wc -l) files, $(du -sh $c | cut -f1)"
