#!/usr/bin/env bash
# scripts/bench_side_by_side.sh — ds4-offload `bench` against llama.cpp's `llama-bench` on the same
# GGUF files, same threads, alternated rounds, and the planner's all-CPU prediction beside the
# measurement (issue 19, "What must be shown"). NOT part of scripts/test.sh or CI: it builds
# llama.cpp (minutes) and runs for minutes.
#
# 1. llama-bench from the PyPI source package llama-cpp-python ($DS4_LCP_VERSION, default 0.3.36,
#    which vendors llama.cpp with the deepseek4 architecture), fetched with pip download into
#    $DS4_LCP_DIR/sdist, extracted into $DS4_LCP_DIR/src, built in $DS4_LCP_DIR/build (CPU only,
#    GGML_NATIVE, its own threadpool; never inside the repository). Reused when already built.
# 2. The models (make-tiny into $DS4_MODELS_DIR, made when missing): tiny-default.gguf (the
#    built-in config, Q8_0 dense, IQ2_XXS/Q2_K experts), tiny-mxfp4.gguf (MXFP4 experts) and
#    tiny-d2048-mxfp4.gguf (configs/models/dsv4-tiny-d2048.json: dim 2048, 32 experts top-4,
#    MXFP4, ~455 MiB, weights from DRAM on most machines).
# 3. A hardware profile with the all-CPU decode calibration: $DS4_SBS_PROFILE when set, else
#    `plan --probe` once (written to $OUT/hw.json).
# 4. $DS4_SBS_ROUNDS rounds; in each, per model, llama-bench and ds4-offload bench (every mode in
#    $DS4_SBS_ACTS) run one after the other, the order rotated every round. Tests: pp64, pp512
#    (prompt from an empty context) and tg64 at depth 64 and 512 (decode after a prompt of that
#    length), one repetition per round each (both tools warm up first).
# 5. Prints a markdown table: median t/s over the rounds, ours / llama.cpp median and per round,
#    and `plan -m MODEL --policy all-cpu --dry-run` decode predictions (at the mean position of
#    the timed decode steps, depth + 31) beside our tg medians, with the load average.
#
# Environment:
#   DS4_BIN         ds4-offload binary (default build/engine/ds4-offload)
#   DS4_LCP_DIR     llama.cpp fetch/build folder (default /work/lcp)
#   DS4_LCP_VERSION llama-cpp-python sdist version (default 0.3.36)
#   DS4_MODELS_DIR  model folder (default /work/models)
#   DS4_SBS_MODELS  space-separated model names from step 2 (default: all three)
#   DS4_SBS_ROUNDS  rounds (default 3); DS4_SBS_THREADS threads for both tools (default 2)
#   DS4_SBS_ACTS    our --activations modes (default "q8 f32"; q8 is what bench's auto picks)
#   DS4_SBS_PROFILE hardware profile JSON with cpu_decode (default: probe once)
#   DS4_SBS_OUT     keep the raw JSON here (default: a temporary folder, removed)
#   DS4_LLAMA_EXTRA extra llama-bench flags (default "--repack 0" when llama-bench knows it: its
#                   CPU repacking refuses the tiny models' odd shapes)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${DS4_BIN:-$ROOT/build/engine/ds4-offload}"
LCP="${DS4_LCP_DIR:-/work/lcp}"
LCP_VERSION="${DS4_LCP_VERSION:-0.3.36}"
MODELS="${DS4_MODELS_DIR:-/work/models}"
NAMES="${DS4_SBS_MODELS:-tiny-default tiny-mxfp4 tiny-d2048-mxfp4}"
ROUNDS="${DS4_SBS_ROUNDS:-3}"
THREADS="${DS4_SBS_THREADS:-2}"
ACTS="${DS4_SBS_ACTS:-q8 f32}"
[[ -x "$BIN" ]] || { echo "bench_side_by_side: no ds4-offload at $BIN (build it, or set DS4_BIN)" >&2; exit 1; }
if [[ -n "${DS4_SBS_OUT:-}" ]]; then OUT="$DS4_SBS_OUT"; mkdir -p "$OUT"
else OUT="$(mktemp -d)"; trap 'rm -rf "$OUT"' EXIT; fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
T0=$(date +%s)

# ---- 1. llama-bench ----
LB="$LCP/build/bin/llama-bench"
if [[ ! -x "$LB" ]]; then
  mkdir -p "$LCP"
  SRC="$(ls -d "$LCP"/src/llama_cpp_python-"$LCP_VERSION"/vendor/llama.cpp 2>/dev/null || true)"
  if [[ -z "$SRC" ]]; then
    if [[ -x "$ROOT/.venv/bin/pip" ]]; then PIP=("$ROOT/.venv/bin/pip"); else PIP=(python3 -m pip); fi
    echo "fetching llama-cpp-python==$LCP_VERSION sdist into $LCP/sdist ..." >&2
    "${PIP[@]}" download --no-deps --no-binary :all: "llama-cpp-python==$LCP_VERSION" -d "$LCP/sdist" >&2
    mkdir -p "$LCP/src"
    tar -xzf "$LCP/sdist/llama_cpp_python-$LCP_VERSION.tar.gz" -C "$LCP/src"
    SRC="$LCP/src/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"
  fi
  grep -q deepseek4 "$SRC/src/llama-arch.cpp" || { echo "bench_side_by_side: $SRC has no deepseek4 architecture" >&2; exit 1; }
  echo "building llama-bench in $LCP/build (minutes) ..." >&2
  LAUNCH=(); command -v ccache >/dev/null && LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$SRC" -B "$LCP/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON "${LAUNCH[@]}" >"$LCP/configure.log" 2>&1 || { tail -n 30 "$LCP/configure.log" >&2; exit 1; }
  nice -n 10 cmake --build "$LCP/build" -j "$THREADS" --target llama-bench >"$LCP/build.log" 2>&1 ||
    { tail -n 30 "$LCP/build.log" >&2; exit 1; }
fi
if [[ -z "${DS4_LLAMA_EXTRA+x}" ]]; then
  if "$LB" --help 2>&1 | grep -q -- "--repack"; then LLAMA_EXTRA="--repack 0"; else LLAMA_EXTRA=""; fi
else
  LLAMA_EXTRA="$DS4_LLAMA_EXTRA"
fi

# ---- 2. models ----
mkdir -p "$MODELS"
make_model() {  # $1 name
  local f="$MODELS/$1.gguf"
  [[ -f "$f" ]] && return 0
  echo "make-tiny $f ..." >&2
  case "$1" in
    tiny-default) "$BIN" make-tiny -o "$f" >&2 ;;
    tiny-mxfp4) "$BIN" make-tiny -o "$f" --experts mxfp4 >&2 ;;
    tiny-d2048-mxfp4) "$BIN" make-tiny -o "$f" --experts mxfp4 --config "$ROOT/configs/models/dsv4-tiny-d2048.json" >&2 ;;
    *) echo "bench_side_by_side: unknown model name '$1'" >&2; exit 2 ;;
  esac
}
for n in $NAMES; do make_model "$n"; done

# ---- 3. profile ----
PROFILE="${DS4_SBS_PROFILE:-}"
if [[ -z "$PROFILE" ]]; then
  PROFILE="$OUT/hw.json"
  echo "plan --probe (all-CPU decode calibration, ~1 min) ..." >&2
  "$BIN" plan --probe --probe-dir "$OUT" --probe-nvme-mib 0 --probe-h2d-mib 0 --write-profile "$PROFILE" >"$OUT/probe.txt"
fi
for n in $NAMES; do
  for a in $ACTS; do
    for d in 64 512; do
      "$BIN" plan -m "$MODELS/$n.gguf" --hw "$PROFILE" --policy all-cpu --activations "$a" --decode-depth $((d + 31)) \
        --json "$OUT/plan.$n.$a.d$d.json" >/dev/null 2>"$OUT/plan.$n.$a.d$d.err" || cat "$OUT/plan.$n.$a.d$d.err" >&2
    done
  done
done

# ---- 4. alternated rounds ----
echo "load average before: $(load)" >"$OUT/load"
run_llama() {  # $1 name $2 round
  "$LB" -m "$MODELS/$1.gguf" -t "$THREADS" $LLAMA_EXTRA -p 64,512 -n 0 -r 1 -o json >"$OUT/llama.$1.pp.$2.json" 2>"$OUT/llama.err"
  "$LB" -m "$MODELS/$1.gguf" -t "$THREADS" $LLAMA_EXTRA -p 0 -n 64 -d 64,512 -r 1 -o json >"$OUT/llama.$1.tg.$2.json" 2>>"$OUT/llama.err"
}
run_ours() {  # $1 name $2 round $3 mode
  "$BIN" bench -m "$MODELS/$1.gguf" -t "$THREADS" --activations "$3" -p 64,512 -n 64 -r 1 -o json \
    >"$OUT/ours.$1.$3.$2.json" 2>"$OUT/ours.err"
}
for ((r = 1; r <= ROUNDS; r++)); do
  for n in $NAMES; do
    jobs=(llama); for a in $ACTS; do jobs+=("ours:$a"); done
    k=$(( (r - 1) % ${#jobs[@]} ))
    for ((i = 0; i < ${#jobs[@]}; i++)); do
      j="${jobs[$(( (i + k) % ${#jobs[@]} ))]}"
      if [[ "$j" == llama ]]; then run_llama "$n" "$r" || { tail -n 20 "$OUT/llama.err" >&2; exit 1; }
      else run_ours "$n" "$r" "${j#ours:}" || { tail -n 20 "$OUT/ours.err" >&2; exit 1; }; fi
    done
    echo "load average after round $r, $n: $(load)" >>"$OUT/load"
  done
done

# ---- 5. table ----
python3 - "$OUT" "$ROUNDS" "$THREADS" "$NAMES" "$ACTS" "$(( $(date +%s) - T0 ))" "$LLAMA_EXTRA" "$(uname -n)" <<'EOF'
import glob, json, os, statistics, sys
out, rounds, threads, names, acts, secs, extra, host = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(), sys.argv[5].split(), sys.argv[6], sys.argv[7], sys.argv[8]
tests = ["pp64", "pp512", "tg64 @ d64", "tg64 @ d512"]
def llama_key(e):
    p, n, d = e.get("n_prompt", 0), e.get("n_gen", 0), e.get("n_depth", 0)
    return f"pp{p}" if n == 0 else f"tg{n} @ d{d}"
val = {}  # (model, impl, test) -> [t/s per round]
for m in names:
    for r in range(1, rounds + 1):
        for part in ("pp", "tg"):
            f = f"{out}/llama.{m}.{part}.{r}.json"
            if os.path.exists(f):
                for e in json.load(open(f)):
                    val.setdefault((m, "llama", llama_key(e)), []).append(e["avg_ts"])
        for a in acts:
            f = f"{out}/ours.{m}.{a}.{r}.json"
            if os.path.exists(f):
                for e in json.load(open(f))["results"]:
                    val.setdefault((m, a, e["test"]), []).append(e["avg_ts"])
pred = {}
for m in names:
    for a in acts:
        for d in (64, 512):
            f = f"{out}/plan.{m}.{a}.d{d}.json"
            if os.path.exists(f):
                pred[(m, a, f"tg64 @ d{d}")] = json.load(open(f))["prediction"]["decode_tok_s"]
med = lambda v: statistics.median(v) if v else float("nan")
print(f"host {host}; {threads} threads both; {rounds} alternated rounds (order rotated), median t/s; "
      f"llama-bench from llama-cpp-python sdist, flags: -t {threads} {extra} -r 1; ours: bench -r 1; took {secs} s")
print(open(f"{out}/load").read().strip())
print()
hdr = "| model | test | llama.cpp t/s |"
sep = "| --- | --- | ---: |"
for a in acts:
    hdr += f" ours {a} t/s | {a} / llama (rounds) | plan {a} t/s | plan / ours |"
    sep += " ---: | --- | ---: | ---: |"
print(hdr); print(sep)
for m in names:
    for t in tests:
        lv = val.get((m, "llama", t), [])
        row = f"| {m} | {t} | {med(lv):.1f} |"
        for a in acts:
            ov = val.get((m, a, t), [])
            per = [o / l for o, l in zip(ov, lv)]
            ratio = f"{med(ov) / med(lv):.2f} ({', '.join(f'{x:.2f}' for x in per)})" if ov and lv else "-"
            p = pred.get((m, a, t))
            row += f" {med(ov):.1f} | {ratio} | " + (f"{p:.1f} | {p / med(ov):.2f} |" if p and ov else "- | - |")
        print(row)
print()
print("plan: `plan -m MODEL --hw PROFILE --policy all-cpu --activations MODE --decode-depth D+31` decode tok/s "
      "(all-CPU cost model with the profile's cpu_decode calibration; no prefill prediction is calibrated).")
EOF
