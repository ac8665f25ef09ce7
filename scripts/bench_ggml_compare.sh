#!/usr/bin/env bash
# scripts/bench_ggml_compare.sh — our CPU expert kernels vs ggml's on the same machine, same shapes,
# same minutes. NOT part of scripts/test.sh or CI (it downloads and builds ggml: minutes).
#
# 1. Gets the llama.cpp source as the llama-cpp-python sdist from PyPI (pip download, cached in
#    $DS4_GGML_CACHE, never in git) or uses $DS4_LLAMA_CPP_SRC (a llama.cpp checkout).
# 2. Builds only ggml's CPU library (GGML_NATIVE=ON; no llama, tests, examples or GPU backends)
#    and our driver bench/ggml_compare/ggml_matvec.cpp (ggml_mul_mat of a 4096x2048 / 2048x4096
#    weight of each type with one activation column through ggml's public API).
# 3. Builds our bench_cpu_kernels and runs both alternately ($DS4_COMPARE_ROUNDS rounds, median
#    per case), then prints GB/s side by side with the load average.
#
# Environment:
#   DS4_GGML_CACHE      cache folder (default ${XDG_CACHE_HOME:-~/.cache}/ds4-ggml-compare)
#   DS4_LLAMA_CPP_SRC   use this llama.cpp source tree instead of downloading the sdist
#   DS4_LCP_VERSION     llama-cpp-python version to download (default: newest)
#   DS4_PIP             pip to use (default .venv/bin/pip, else python3 -m pip)
#   DS4_GGML_OPENMP     ON/OFF: ggml threads by OpenMP or by its own threadpool (default OFF)
#   DS4_GGML_ISA        native (default: GGML_NATIVE=ON) or avx2 (GGML_NATIVE=OFF, AVX2+FMA+F16C, no
#                       AVX-512/VNNI: ggml's AVX2 kernels, to compare our avx2 family like for like on
#                       an AVX-512 CPU)
#   DS4_GGML_BUILD      ggml build folder (default $DS4_GGML_CACHE/build-openmp-<ON|OFF>, with -avx2
#                       appended for DS4_GGML_ISA=avx2)
#   DS4_BUILD           our build folder (default build-ggml-compare; configured if missing)
#   DS4_COMPARE_ROUNDS  alternating rounds (default 3); DS4_COMPARE_MIN_TIME seconds per case (0.3)
#   DS4_COMPARE_TYPES   comma list of ggml type names (default q8_0,q2_K,iq2_xxs,iq2_xs,iq1_s,iq1_m,mxfp4)
#   DS4_COMPARE_FAMILIES '|' list of our kernel families to run (default avx2|avxvnni|avx512vnni; those the
#                       CPU lacks are absent from the benchmark and so from the table)
#   DS4_GGML_FLAVOR     mainline (default; everything above) or ik: compare with ik_llama.cpp's ggml
#                       instead (the fork with the iqk_mul_mat CPU kernels). Then the source is the
#                       ik_llama_cpp_python sdist (pip download into $DS4_GGML_CACHE, version
#                       $DS4_IK_VERSION, default newest) or $DS4_IK_SRC (an ik_llama.cpp tree); the
#                       driver is the same ggml_matvec.cpp built as ik_matvec; DS4_GGML_OPENMP defaults
#                       to ON (ik's ggml has no threadpool API: without OpenMP it creates its threads
#                       in every graph compute); the build folder defaults to
#                       $DS4_GGML_CACHE/build-ik-openmp-<ON|OFF>. Weights stay in the GGUF layout (no
#                       run-time repacking, ik's -rtr; ik_matvec --rtr 1 measures that by hand).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DS4_GGML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ds4-ggml-compare}"
FLAVOR="${DS4_GGML_FLAVOR:-mainline}"
case "$FLAVOR" in
  mainline) OPENMP="${DS4_GGML_OPENMP:-OFF}" ;;
  ik) OPENMP="${DS4_GGML_OPENMP:-ON}" ;;
  *) echo "bench_ggml_compare: DS4_GGML_FLAVOR must be mainline or ik, not '$FLAVOR'" >&2; exit 2 ;;
esac
ISA="${DS4_GGML_ISA:-native}"
case "$ISA" in
  native) ISA_SUFFIX="" ;;
  avx2) ISA_SUFFIX="-avx2" ;;
  *) echo "bench_ggml_compare: DS4_GGML_ISA must be native or avx2, not '$ISA'" >&2; exit 2 ;;
esac
BUILD="${DS4_BUILD:-$ROOT/build-ggml-compare}"
ROUNDS="${DS4_COMPARE_ROUNDS:-3}"
MIN_TIME="${DS4_COMPARE_MIN_TIME:-0.3}"
TYPES="${DS4_COMPARE_TYPES:-q8_0,q2_K,iq2_xxs,iq2_xs,iq1_s,iq1_m,mxfp4}"
FAMILIES="${DS4_COMPARE_FAMILIES:-avx2|avxvnni|avx512vnni}"
THREADS="$(nproc)"
mkdir -p "$CACHE"

pip_cmd() {
  if [[ -n "${DS4_PIP:-}" ]]; then PIP=($DS4_PIP)
  elif [[ -x "$ROOT/.venv/bin/pip" ]]; then PIP=("$ROOT/.venv/bin/pip")
  else PIP=(python3 -m pip); fi
}

# Prints the newest extracted $CACHE/src/<prefix>-*/vendor/<sub>, downloading and extracting the
# PyPI sdist first when there is none. $1 sdist file prefix, $2 pip name, $3 version ("" = newest),
# $4 vendored source folder.
sdist_src() {
  local src tarball spec="$2${3:+==$3}"
  src="$(ls -d "$CACHE"/src/"$1"-*/vendor/"$4" 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -z "$src" ]]; then
    pip_cmd
    echo "fetching $spec sdist into $CACHE/sdist ..." >&2
    "${PIP[@]}" download --no-deps --no-binary :all: "$spec" -d "$CACHE/sdist" >&2
    tarball="$(ls "$CACHE"/sdist/"$1"-*.tar.gz | sort -V | tail -n 1)"
    mkdir -p "$CACHE/src"
    tar -xzf "$tarball" -C "$CACHE/src"
    src="$(ls -d "$CACHE"/src/"$1"-*/vendor/"$4" | sort -V | tail -n 1)"
  fi
  echo "$src"
}

# ---- 1. llama.cpp (or ik_llama.cpp) source ----
if [[ "$FLAVOR" == ik ]]; then
  SRC="${DS4_IK_SRC:-$(sdist_src ik_llama_cpp_python ik_llama_cpp_python "${DS4_IK_VERSION:-}" ik_llama.cpp)}"
else
  SRC="${DS4_LLAMA_CPP_SRC:-$(sdist_src llama_cpp_python llama-cpp-python "${DS4_LCP_VERSION:-}" llama.cpp)}"
fi
[[ -f "$SRC/ggml/CMakeLists.txt" ]] || { echo "bench_ggml_compare: no ggml source at $SRC/ggml" >&2; exit 1; }

# ---- 2. ggml CPU library + our driver ----
if [[ "$FLAVOR" == ik ]]; then
  GBUILD="${DS4_GGML_BUILD:-$CACHE/build-ik-openmp-$OPENMP$ISA_SUFFIX}"
  DRIVER=ik_matvec LOGS="$CACHE/ik-" LABEL="ik_llama.cpp"
  THREADING="$([[ "$OPENMP" == ON ]] && echo OpenMP || echo "threads created per graph compute")"
else
  GBUILD="${DS4_GGML_BUILD:-$CACHE/build-openmp-$OPENMP$ISA_SUFFIX}"
  DRIVER=ggml_matvec LOGS="$CACHE/" LABEL="ggml"
  THREADING="$([[ "$OPENMP" == ON ]] && echo OpenMP || echo "its own threadpool")"
fi
cmake -S "$ROOT/bench/ggml_compare" -B "$GBUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS4_GGML_FLAVOR="$FLAVOR" \
  -DDS4_GGML_SRC="$SRC/ggml" -DGGML_OPENMP="$OPENMP" -DDS4_GGML_ISA="$ISA" >"${LOGS}configure.log" 2>&1 ||
  { tail -n 30 "${LOGS}configure.log" >&2; exit 1; }
cmake --build "$GBUILD" -j "$THREADS" --target "$DRIVER" >"${LOGS}build.log" 2>&1 ||
  { tail -n 30 "${LOGS}build.log" >&2; exit 1; }

# ---- 3. our benchmark ----
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS4_CUDA=OFF -DDS4_BUILD_BENCH=ON >&2
fi
cmake --build "$BUILD" -j "$THREADS" --target bench_cpu_kernels >&2

# Our bench names types as ggml does (Q8_0, IQ2_XXS, ...); filter on the requested ones.
OURS_RE="$(python3 -c "import sys; print('|'.join(t.upper() for t in sys.argv[1].split(',')))" "$TYPES")"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load average before: $(load)" >"$OUT/load"
for ((r = 1; r <= ROUNDS; r++)); do
  for t in 1 "$THREADS"; do
    "$GBUILD/$DRIVER" --threads "$t" --types "$TYPES" --min-time "$MIN_TIME" --reps 1 >>"$OUT/ggml.csv"
  done
  "$BUILD/bench/bench_cpu_kernels" --benchmark_filter="^($OURS_RE)/.*/($FAMILIES)/" --benchmark_min_time="$MIN_TIME" \
    --benchmark_format=json >"$OUT/ours.$r.json" 2>"$OUT/ours.$r.err"
  echo "load average after round $r: $(load)" >>"$OUT/load"
done

python3 - "$OUT" "$ROUNDS" "$THREADING" "$(uname -n)" "$LABEL" <<'EOF'
import csv, glob, json, statistics, sys
out, rounds, threading, host, lab = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
ggml, ggml_cpu, vdt = {}, {}, {}
for row in csv.reader(open(f"{out}/ggml.csv")):
    _, typ, shape, rows, cols, th, mode, vd, gbps, ms, cpu_gbps = row
    key = (typ.upper(), shape, int(th), mode)
    ggml.setdefault(key, []).append(float(gbps))
    ggml_cpu.setdefault(key, []).append(float(cpu_gbps))
    vdt[typ.upper()] = vd
ours, ours_cpu, ctx, fams = {}, {}, {}, []
for f in sorted(glob.glob(f"{out}/ours.*.json")):
    d = json.load(open(f))
    ctx = d.get("context", ctx)
    for b in d["benchmarks"]:
        # e.g. Q8_0/expert_down_4096x2048/b1/avx2/t2/cold/real_time
        p = b["name"].split("/")
        if p[3] not in fams:
            fams.append(p[3])
        key = (p[0], p[1], int(p[4][1:]), p[5], p[3])
        ours.setdefault(key, []).append(float(b["GBps"]))
        # weight_MB (1e6 B) per iteration / cpu_time (ms) = GB per CPU-second
        ours_cpu.setdefault(key, []).append(float(b["weight_MB"]) / float(b["cpu_time"]))
med = lambda v: statistics.median(v) if v else float("nan")
print(f"host {host}; {lab} threads via {threading}; "
      f"{rounds} alternating rounds, median GB/s of weight bytes (1e9 B/s)")
print("probe (ours, start of each bench run, last):", ctx.get("host_memory_bandwidth", "?"))
print("our Auto policy picks:", ctx.get("auto_kernels", "?"))
print(open(f"{out}/load").read().strip())
print(f"{lab}: activations quantized inside the timed mul_mat to the type's vec_dot_type "
      "(" + ", ".join(f"{t}->{v}" for t, v in sorted(vdt.items())) + "); weights from ggml's quantizer on N(0,1)")
print("ours: Q8_1 activations quantized once outside the timing (as the engine does per token); "
      "random weight bytes with sane scales; kernel families " + ", ".join(fams) + f" ({lab}: -march=native)")
print()
print(f"| type | shape | threads | mode | {lab} GB/s | " + " | ".join(f"{f} GB/s | {f} / {lab}" for f in fams) + " |")
print("| --- | --- | ---: | --- | ---: | " + " | ".join("---: | ---:" for f in fams) + " |")
for key in sorted(ggml, key=lambda k: (k[0], k[1], k[2], k[3])):
    g = med(ggml[key])
    cells = []
    for f in fams:
        o = med(ours.get(key + (f,), []))
        cells.append(f"{o:.2f} | {o / g:.2f}x" if o == o else "- | -")
    if all(c == "- | -" for c in cells):
        continue
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {g:.2f} | " + " | ".join(cells) + " |")
print()
print("Kernel speed per core: 1 thread, hot, GB per second of CPU time (other processes sharing")
print(f"the core do not count; {lab}'s includes its activation quantization):")
print()
print(f"| type | shape | {lab} GB/CPU-s | " + " | ".join(f"{f} GB/CPU-s | {f} / {lab}" for f in fams) + " |")
print("| --- | --- | ---: | " + " | ".join("---: | ---:" for f in fams) + " |")
for key in sorted(k for k in ggml_cpu if k[2] == 1 and k[3] == "hot"):
    g = med(ggml_cpu[key])
    cells = []
    for f in fams:
        o = med(ours_cpu.get(key + (f,), []))
        cells.append(f"{o:.2f} | {o / g:.2f}x" if o == o else "- | -")
    print(f"| {key[0]} | {key[1]} | {g:.2f} | " + " | ".join(cells) + " |")
EOF
