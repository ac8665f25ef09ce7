#!/usr/bin/env bash
# scripts/gpu_check_model.sh — the model-level half of scripts/gpu_check.sh (issue 18 item 5). Steps:
#   build        builds ds4-offload and device_conformance_cuda_test in the GPU build folder;
#   conformance  runs device_conformance_cuda_test: the device API conformance suite (every op against a
#                double-precision evaluation, tests/device) on the real CUDA device 0; its "skipped"
#                exit (77, no usable device) counts as a failure here;
#   tiny         the dsv4-tiny fixture GGUF, on backend A (cuda) and backend B (cpu), with the experts
#                resident and with `--experts-tier host`: `run` greedy 32 tokens (its streamed text must
#                be equal) and `score` teacher-forced over the fixture's golden prompt (argmax per position
#                must be equal; max |logit difference| printed, FAIL above DS4_LOGIT_TOL);
#   shapes       a synthetic model with DeepSeek-V4-Flash's layer shapes (configs/models/dsv4-flash-shapes.json,
#                written by `make-tiny --random-blocks`: valid random quant blocks, no quantizer), as many
#                layers as fit the card's free memory, the disk and the time left (at most
#                DS4_SHAPE_MAX_LAYERS), then `bench -p 512 -n 64` on it: prefill and decode tok/s,
#                weight GB/s read per decoded token (bench's tiers line) and the fraction of DS4_COPY_GBPS.
# `gpu_check_model.sh compare ...` / `bench-summary MD` run only the comparison / the bench parsing.
# Every step has its own timeout, capped by the shared deadline; a failing step writes FAIL and its log
# path to the summary and the script goes on. Exit status: 0 when no step failed, 1 otherwise.
#
# Environment (gpu_check.sh sets the first five):
#   DS4_GPU_BUILD_DIR  build folder (configured already)      DS4_GPU_SUMMARY  summary file (appended to)
#   DS4_GPU_LOGDIR     log folder                             DS4_COPY_GBPS    measured device copy GB/s ('' = unknown)
#   DS4_CHECK_DEADLINE epoch seconds by which everything must end (default now + 600)
#   DS4_FIXTURES       fixture folder (default ../shared/fixtures from the repo root)
#   DS4_CHECK_STEPS    steps to run (default "build conformance tiny shapes")
#   DS4_CHECK_BACKENDS the two backends compared (default "cuda cpu"; "cpu cpu" tests the script without a GPU)
#   DS4_SHAPE_BACKEND  bench backend (default cuda)           DS4_SHAPE_BENCH_ARGS (default "-p 512 -n 64 -r 2")
#   DS4_SHAPE_LAYERS   force the layer count                  DS4_SHAPE_MAX_LAYERS (default 8)
#   DS4_SHAPE_EXPERTS  make-tiny --experts for the synthetic model (default '' = the public Q2 mix:
#                      IQ2_XXS gate/up, Q2_K down; or q8_0, q2_k, iq2_xxs, iq2_xs, iq1_s, iq1_m, mxfp4).
#                      The blocks are random (--random-blocks), so any type takes seconds per layer.
#   DS4_LOGIT_TOL      max |logit difference| accepted (default 1e-2)   DS4_JOBS build jobs (default nproc)
# shellcheck disable=SC2317  # the do_* steps are called indirectly ("do_$s")
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DS4_GPU_BUILD_DIR:-$ROOT/build-gpu}"
SUMMARY="${DS4_GPU_SUMMARY:-$ROOT/gpu-check-summary.txt}"
LOGDIR="${DS4_GPU_LOGDIR:-$BUILD/gpu-check-logs}"
COPY_GBPS="${DS4_COPY_GBPS:-}"
DEADLINE="${DS4_CHECK_DEADLINE:-$(( $(date +%s) + 600 ))}"
FIXTURES="${DS4_FIXTURES:-$ROOT/../shared/fixtures}"
STEPS="${DS4_CHECK_STEPS:-build conformance tiny shapes}"
read -r BACK_A BACK_B <<< "${DS4_CHECK_BACKENDS:-cuda cpu}"
SHAPE_BACKEND="${DS4_SHAPE_BACKEND:-cuda}"
SHAPE_BENCH_ARGS="${DS4_SHAPE_BENCH_ARGS:--p 512 -n 64 -r 2}"
MAX_LAYERS="${DS4_SHAPE_MAX_LAYERS:-8}"
SHAPE_EXPERTS="${DS4_SHAPE_EXPERTS-}"
LOGIT_TOL="${DS4_LOGIT_TOL:-1e-2}"
JOBS="${DS4_JOBS:-$(nproc 2>/dev/null || echo 4)}"
DS4="$BUILD/engine/ds4-offload"
TINY="$FIXTURES/dsv4-tiny/dsv4-tiny-mxfp4.gguf"
FAILED=0
mkdir -p "$LOGDIR"

say() { echo "gpu_check_model: $*" >&2; }
sum() { echo "$*" >> "$SUMMARY"; }
# fail NAME LOG [WHY]: records a failed step in the summary.
fail() { FAILED=1; sum "FAIL $1${3:+ ($3)}: see $2"; say "FAIL $1, see $2"; }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }

# limit WANT: prints the timeout for a step, WANT seconds capped by the time left before DEADLINE;
# returns 1 (prints 0) when under 10 s are left.
limit() {
  local left=$(( DEADLINE - $(date +%s) ))
  (( left < 10 )) && { echo 0; return 1; }
  (( left < $1 )) && echo "$left" || echo "$1"
}

# step NAME WANT LOG CMD...: runs CMD under `timeout` (WANT capped by the deadline) with stdout and
# stderr in LOG; records FAIL (timeout or status) and returns the status.
step() {
  local name="$1" want="$2" log="$3" t rc; shift 3
  if ! t=$(limit "$want"); then fail "$name" "$log" "out of time, not run"; return 1; fi
  timeout "$t" "$@" > "$log" 2>&1; rc=$?
  if (( rc == 124 )); then fail "$name" "$log" "timed out after ${t} s"
  elif (( rc != 0 )); then fail "$name" "$log" "exit status $rc"; fi
  return "$rc"
}

# ---- build + conformance -------------------------------------------------------------------------
do_build() {
  sum ""; sum "== ds4-offload + device_conformance_cuda_test build =="
  local b0; b0=$(date +%s)
  step "build ds4-offload device_conformance_cuda_test" 300 "$LOGDIR/build_model.log" \
      cmake --build "$BUILD" -j "$JOBS" --target ds4-offload device_conformance_cuda_test \
    && sum "PASS build: $(( $(date +%s) - b0 )) s"
}

do_conformance() {
  sum ""; sum "== device_conformance_cuda_test (the conformance suite on the real CUDA device 0) =="
  local bin log="$LOGDIR/device_conformance_cuda.log" rc
  bin=$(find "$BUILD" -type f -name device_conformance_cuda_test -perm -u+x | head -1)
  if [[ -z "$bin" ]]; then fail "device_conformance_cuda_test" "$LOGDIR/build_model.log" "binary not built"; return; fi
  step "device_conformance_cuda_test" 200 "$log" "$bin"; rc=$?
  if (( rc == 0 )); then
    sum "PASS device_conformance_cuda_test on $(grep -m1 '^device: ' "$log" | cut -c9-): $(grep -m1 -E '^\[  PASSED  \]' "$log")"
  elif (( rc == 77 )); then
    sum "  (exit 77: the binary found no CUDA device: $(grep -m1 SKIPPED "$log"))"
  else
    grep -E '^\[  FAILED  \]' "$log" | head -10 >> "$SUMMARY"
  fi
}

# ---- tiny model: backend A vs backend B ----------------------------------------------------------
# compare_runs LABEL TEXT_A TEXT_B LOGITS_A LOGITS_B NPOS: compares two backends' outputs: the `run`
# texts (greedy tokens, as streamed) must be byte-equal; the `score` logits (float32 [NPOS x vocab])
# must have the same argmax at every position and max |difference| <= LOGIT_TOL. Prints one line;
# returns 0 when everything agrees.
compare_runs() {
  python3 - "$@" "$LOGIT_TOL" <<'PY'
import sys, struct
label, ta, tb, la, lb, npos, tol = sys.argv[1:8]
npos, tol = int(npos), float(tol)
text_eq = open(ta, "rb").read() == open(tb, "rb").read()
a, b = open(la, "rb").read(), open(lb, "rb").read()
ok = text_eq
if len(a) != len(b) or len(a) == 0 or len(a) % (4 * npos) != 0:
    print(f"{label}: run text {'equal' if text_eq else 'DIFFERS'}; logits sizes differ or bad ({len(a)} vs {len(b)} B)")
    sys.exit(1)
n = len(a) // 4
fa, fb = struct.unpack(f"<{n}f", a), struct.unpack(f"<{n}f", b)
vocab = n // npos
maxd, arg_eq = 0.0, 0
for p in range(npos):
    ra, rb = fa[p * vocab:(p + 1) * vocab], fb[p * vocab:(p + 1) * vocab]
    arg_eq += max(range(vocab), key=ra.__getitem__) == max(range(vocab), key=rb.__getitem__)
    maxd = max(maxd, max(abs(x - y) for x, y in zip(ra, rb)))
ok = ok and arg_eq == npos and maxd <= tol
print(f"{label}: run greedy text {'equal' if text_eq else 'DIFFERS'}; score argmax equal at {arg_eq}/{npos} positions;"
      f" max |dlogit| {maxd:.3g} (tol {tol:g}) -> {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

# tiny_one SIDE BACKEND TIER: `run` (greedy 32 tokens) and `score` (golden prompt) on BACKEND with
# `--experts-tier TIER`; outputs $LOGDIR/tiny_SIDE_BACKEND_TIER.{text,logits.f32,run.log,score.log}.
tiny_one() {
  local tag="tiny_${1}_${2}_${3}"
  step "$tag run" 90 "$LOGDIR/$tag.run.log" bash -c '"$@" > "'"$LOGDIR/$tag.text"'"' _ \
      "$DS4" run -m "$TINY" --backend "$2" --experts-tier "$3" -p "The quick brown fox" -n 32 --temp 0 --ignore-eos \
    || return 1
  step "$tag score" 90 "$LOGDIR/$tag.score.log" \
      "$DS4" score -m "$TINY" --backend "$2" --experts-tier "$3" --token-ids "$LOGDIR/tiny_ids.txt" \
      --logits-out "$LOGDIR/$tag.logits.f32"
}

do_tiny() {
  sum ""; sum "== tiny model ($TINY): $BACK_A vs $BACK_B, run greedy 32 tokens + score logits =="
  if [[ ! -s "$TINY" ]]; then fail "tiny" "$TINY" "fixture missing (DS4_FIXTURES=$FIXTURES)"; return; fi
  if [[ ! -x "$DS4" ]]; then fail "tiny" "$LOGDIR/build_model.log" "ds4-offload not built"; return; fi
  # The teacher-forced sequence: the first 48 ids of the fixture's first golden prompt.
  local npos
  npos=$(python3 - "$FIXTURES/dsv4-tiny/goldens.json" "$LOGDIR/tiny_ids.txt" <<'PY'
import json, sys
ids = json.load(open(sys.argv[1]))["prompts"][0]["prompt_ids"][:48]
open(sys.argv[2], "w").write(" ".join(map(str, ids)) + "\n")
print(len(ids))
PY
  ) || { fail "tiny ids" "$FIXTURES/dsv4-tiny/goldens.json" "cannot read prompt_ids"; return; }
  local tier ok a b line
  for tier in resident host; do
    ok=1
    tiny_one a "$BACK_A" "$tier" || ok=0
    tiny_one b "$BACK_B" "$tier" || ok=0
    (( ok )) || continue
    a="$LOGDIR/tiny_a_${BACK_A}_$tier"; b="$LOGDIR/tiny_b_${BACK_B}_$tier"
    if line=$(compare_runs "experts $tier" "$a.text" "$b.text" "$a.logits.f32" "$b.logits.f32" "$npos"); then
      sum "PASS $line"
    else
      sum "$line"; fail "tiny experts $tier compare" "$LOGDIR/tiny_[ab]_*_$tier.*"
    fi
  done
}

# ---- synthetic DeepSeek-V4-Flash-shaped model + bench -----------------------------------------------
# shape_config N OUT: writes configs/models/dsv4-flash-shapes.json with N layers to OUT. N = 1 is the
# file as it is (one ratio-4 layer: compressor + indexer, the largest layer kind, so the per-layer
# bytes measured on it bound the others); N > 1 follows the published pattern 0,0,4,128,4,128,...
# with min(3, N) hash-routed layers.
shape_config() {
  python3 - "$ROOT/configs/models/dsv4-flash-shapes.json" "$1" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); n = int(sys.argv[2])
if n > 1:
    c["n_layers"], c["n_hash_layers"] = n, min(3, n)
    c["compress_ratios"] = [0 if l < 2 else (4 if l % 2 == 0 else 128) for l in range(n)] + [0]
    c["name"] = f"dsv4-flash-shapes-{n}l"
json.dump(c, open(sys.argv[3], "w"), indent=1)
PY
}

# make_shape N WANT: writes $LOGDIR/shapes_N.gguf (make-tiny --random-blocks under a WANT-second
# timeout); prints the seconds make-tiny took. A file left by an earlier run from the same config and
# expert types is reused (its time too).
make_shape() {
  local n="$1" t0 j="$LOGDIR/shapes_$1.json" g="$LOGDIR/shapes_$1.gguf"
  shape_config "$n" "$j.new" || return 1
  if [[ -s "$g" && -s "$g.secs" && "$(cat "$g.experts" 2> /dev/null)" == "random $SHAPE_EXPERTS" ]] && cmp -s "$j" "$j.new"; then
    rm -f "$j.new"; say "reusing $g"; cat "$g.secs"; return 0
  fi
  mv "$j.new" "$j"; rm -f "$g" "$g.secs" "$g.experts"; t0=$(date +%s)
  local ex=(); [[ -n "$SHAPE_EXPERTS" ]] && ex=(--experts "$SHAPE_EXPERTS")
  step "make-tiny $n layers" "$2" "$LOGDIR/make_tiny_$n.log" "$DS4" make-tiny -o "$g" --config "$j" --random-blocks "${ex[@]}" || return 1
  echo "random $SHAPE_EXPERTS" > "$g.experts"
  echo $(( $(date +%s) - t0 )) | tee "$g.secs"
}

# bench_summary MD_OUT: the prefill/decode rows and the tiers line of a `bench -o md` output, and
# weight GB/s per decoded token = (sum of the tiers' B/tok) x decode tok/s, with its fraction of COPY_GBPS.
bench_summary() {
  python3 - "$1" "$COPY_GBPS" <<'PY'
import re, sys
txt = open(sys.argv[1]).read(); copy = float(sys.argv[2]) if sys.argv[2] else 0.0
pp = re.search(r"\|\s*(pp\d+)\s*\|\s*([\d.]+)", txt); tg = re.search(r"\|\s*(tg\d+[^|]*)\|\s*([\d.]+)", txt)
tiers = re.search(r"- tiers \(([^)]*)\)[^:]*: device-resident ([\d.e+-]+), staged ([\d.e+-]+) \(H2D [^)]*\), host ([\d.e+-]+)", txt)
print(f"prefill {pp.group(1)}: {pp.group(2)} tok/s" if pp else "prefill: no row found")
print(f"decode {tg.group(1).strip()}: {tg.group(2)} tok/s" if tg else "decode: no row found")
if tiers and tg:
    bpt = sum(float(tiers.group(i)) for i in (2, 3, 4))
    gbps = bpt * float(tg.group(2)) / 1e9
    frac = (f"{gbps / copy:.3f} of the measured device copy bandwidth {copy:.1f} GB/s (read + write bytes)"
            if copy > 0 else "copy bandwidth unknown")
    print(f"weights read per decoded token: {bpt:.4g} B (device-resident {tiers.group(2)}, staged {tiers.group(3)}, host {tiers.group(4)})")
    print(f"weight read rate: {gbps:.1f} GB/s = {frac}")
else:
    print("tiers line not found: no GB/s figure"); sys.exit(1)
PY
}

do_shapes() {
  sum ""; sum "== synthetic DeepSeek-V4-Flash-shaped model (dim 4096, 256 experts top-6, 1 shared, ff 2048; random ${SHAPE_EXPERTS:-IQ2_XXS/Q2_K} expert blocks) =="
  if [[ ! -x "$DS4" ]]; then fail "shapes" "$LOGDIR/build_model.log" "ds4-offload not built"; return; fi
  # One layer first: its file size is the per-layer bytes (vocab 512: embed/head are negligible),
  # its time the per-layer make-tiny cost.
  local s1 bytes1 n free_mib by_mem by_time by_disk left bench_t=150
  s1=$(make_shape 1 200) || { FAILED=1; return; }  # (its FAIL line is written; the flag is lost in $(...))
  bytes1=$(stat -c %s "$LOGDIR/shapes_1.gguf")
  (( s1 < 1 )) && s1=1
  left=$(( DEADLINE - $(date +%s) - bench_t - 20 ))
  by_time=$(( left / s1 ))
  if [[ -n "${DS4_SHAPE_LAYERS:-}" ]]; then n="$DS4_SHAPE_LAYERS"; by_mem="forced"
  else
    free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
    [[ "$free_mib" =~ ^[0-9]+$ ]] || free_mib=0
    # Keep 15% + 2 GiB of the free memory for the workspace, KV state and the CUDA context.
    by_mem=$(( (free_mib * 1048576 * 85 / 100 - 2147483648) / bytes1 ))
    # make-tiny --random-blocks holds one tensor (an expert stack, < 1 GiB) in RAM, so the disk bounds
    # the N-layer file (written next to the 1-layer one): 80% of the space left.
    by_disk=$(( $(df -Pk "$LOGDIR" | awk 'NR == 2 {print $4}') * 1024 * 80 / 100 / bytes1 ))
    n=$by_mem; (( n > by_time )) && n=$by_time; (( n > by_disk )) && n=$by_disk
    (( n > MAX_LAYERS )) && n=$MAX_LAYERS; (( n < 1 )) && n=1
  fi
  sum "per layer: $(( bytes1 / 1048576 )) MiB, make-tiny ${s1} s; layers: $n (fit by free GPU memory ${free_mib:-?} MiB: $by_mem, by time left: $by_time, by disk: ${by_disk:-?}, max $MAX_LAYERS)"
  if (( n > 1 )); then make_shape "$n" $(( left + 20 )) > /dev/null || return; fi
  local md="$LOGDIR/bench_shapes_$n.md"
  # shellcheck disable=SC2086  # SHAPE_BENCH_ARGS is a list of words
  if step "bench shapes ($n layers, $SHAPE_BACKEND)" "$bench_t" "$LOGDIR/bench_shapes_$n.log" bash -c '"$@" > "'"$md"'"' _ \
      "$DS4" bench -m "$LOGDIR/shapes_$n.gguf" --backend "$SHAPE_BACKEND" --experts-tier resident -c 1024 $SHAPE_BENCH_ARGS; then
    bench_summary "$md" >> "$SUMMARY" || fail "bench shapes summary" "$md" "rows not found"
  fi
}

# `gpu_check_model.sh compare LABEL TEXT_A TEXT_B LOGITS_A LOGITS_B NPOS` runs only the comparison.
# `gpu_check_model.sh bench-summary MD` prints only the bench figures of a `bench -o md` output.
if [[ "${1:-}" == compare ]]; then shift; compare_runs "$@"; exit $?; fi
if [[ "${1:-}" == bench-summary ]]; then bench_summary "$2"; exit $?; fi
for s in build conformance tiny shapes; do
  if has_step "$s"; then say "step $s"; "do_$s"; fi
done
exit $FAILED
