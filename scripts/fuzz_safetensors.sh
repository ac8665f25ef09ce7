#!/bin/sh
# scripts/fuzz_safetensors.sh CLANGXX OUTDIR SECONDS — builds the libFuzzer target of the
# safetensors header parser (tests/gguf/safetensors_fuzz.cpp) with ASan + UBSan and runs it for
# SECONDS from a seed corpus of valid and malformed headers. Exit 77 when clang cannot build
# a fuzzer here (no libclang-rt); non-zero when the fuzzer finds a crash.
set -eu
cxx="$1"; out="$2"; secs="$3"
src="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out/corpus"
bin="$out/safetensors_fuzz"
if [ ! -x "$bin" ] || [ "$src/gguf/safetensors.cpp" -nt "$bin" ] || [ "$src/tests/gguf/safetensors_fuzz.cpp" -nt "$bin" ]; then
  if ! "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I"$src" -I"$src/common" "$src/tests/gguf/safetensors_fuzz.cpp" "$src/gguf/safetensors.cpp" -o "$bin.tmp" 2>"$out/build.log"; then
    if grep -q "fuzzer" "$out/build.log"; then echo "no libFuzzer runtime for $cxx; skipped"; cat "$out/build.log"; exit 77; fi
    cat "$out/build.log"; exit 1
  fi
  mv "$bin.tmp" "$bin"
fi
# Seeds: one valid two-tensor file and a few near-misses.
python3 - "$out/corpus" <<'PY'
import struct, sys, os
d = sys.argv[1]
def w(name, header, data):
    h = header.encode()
    open(os.path.join(d, name), "wb").write(struct.pack("<Q", len(h)) + h + data)
w("valid", '{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[8,12]}}', bytes(12))
w("overlap", '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', bytes(6))
w("deep", '{"a":' + '[' * 40 + ']' * 40 + '}', b"")
w("i64", '{"t":{"dtype":"I64","shape":[3,1],"data_offsets":[0,24]}}', bytes(24))
PY
rc=0
"$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus" >"$out/run.log" 2>&1 || rc=$?
grep -E "^(Done|stat::)|ERROR|SUMMARY" "$out/run.log" || tail -n 20 "$out/run.log"
exit $rc
