#!/usr/bin/env bash
# scripts/gpu_check_model.sh — the model-level half of scripts/gpu_check.sh (issue 18 item 5). Steps:
#   build        builds ds4-offload and device_conformance_cuda_test in the GPU build folder;
#   conformance  runs device_conformance_cuda_test: the device API conformance suite (every op against a
#                double-precision evaluation, tests/device) on the real CUDA device 0; its "skipped"
#                exit (77, no usable device) counts as a failure here;
#   tiny         the dsv4-tiny fixture GGUF, on backend A (cuda) and backend B (cpu), with the experts
#                resident and with `--experts-tier host`: `run` greedy 32 tokens (its streamed text must
#                be equal) and `score` teacher-forced over the fixture's golden prompt (argmax per position
#                must be equal; max |logit difference| printed, FAIL above DS4_LOGIT_TOL); then at every
#                TP 2, 4 that fits the GPU count (nvidia-smi -L; the tiny model's 4 output groups rule
#                out 8): backend A `--tp N` with the experts resident (run + score vs backend B's tp 1),
#                and with a plan for N GPUs that stages part of the experts (`plan` on a capped
#                profile, make_staged_plan below; `run` text vs backend B's);
#   shapes       a synthetic model with DeepSeek-V4-Flash's layer shapes (configs/models/dsv4-flash-shapes.json,
#                written by `make-tiny --random-blocks`: valid random quant blocks, no quantizer), as many
#                layers as fit the card's free memory, the disk and the time left (at most
#                DS4_SHAPE_MAX_LAYERS), then `bench -p 512 -n 64` on it: prefill and decode tok/s,
#                weight GB/s read per decoded token (bench's tiers line) and the fraction of DS4_COPY_GBPS;
#                then the same model with a plan that stages part of the experts (make_staged_plan: the
#                machine's probed profile, `plan --probe`, with each GPU's VRAM capped so that about
#                DS4_SHAPE_VRAM_SHARE of the experts stay resident and CPU compute made unattractive)
#                and `bench --plan ... -o json` (DS4_SHAPE_STAGED_ARGS): decode tok/s, overlap, cache,
#                and per GPU the measured bytes per token per tier beside the plan's prediction.
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
#   DS4_GPU_COUNT      GPUs to use (default: nvidia-smi -L count; 0 without nvidia-smi)
#   DS4_SHAPE_TP       --tp of the staged shapes bench (default 1)  DS4_SHAPE_VRAM_SHARE (default 0.5)
#   DS4_SHAPE_STAGED_ARGS bench arguments of the staged run (default "-p 128 -n 32 -r 1")
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
SHAPE_TP="${DS4_SHAPE_TP:-1}"
VRAM_SHARE="${DS4_SHAPE_VRAM_SHARE:-0.5}"
SHAPE_STAGED_ARGS="${DS4_SHAPE_STAGED_ARGS:--p 128 -n 32 -r 1}"
DS4="$BUILD/engine/ds4-offload"
TINY="$FIXTURES/dsv4-tiny/dsv4-tiny-mxfp4.gguf"
FAILED=0
mkdir -p "$LOGDIR"

say() { echo "gpu_check_model: $*" >&2; }
sum() { echo "$*" >> "$SUMMARY"; }
# fail NAME LOG [WHY]: records a failed step in the summary.
fail() { FAILED=1; sum "FAIL $1${3:+ ($3)}: see $2"; say "FAIL $1, see $2"; }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }

# gpu_count: GPUs on this machine (nvidia-smi -L lines), DS4_GPU_COUNT when set, 0 without nvidia-smi.
gpu_count() {
  if [[ -n "${DS4_GPU_COUNT:-}" ]]; then echo "$DS4_GPU_COUNT"; return; fi
  command -v nvidia-smi > /dev/null 2>&1 || { echo 0; return; }
  nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true
}
NGPU="$(gpu_count)"
[[ "$NGPU" =~ ^[0-9]+$ ]] || NGPU=0

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
  if [[ "${DS4_GPU_PREBUILT:-0}" == 1 ]]; then sum "PASS build: prebuilt (DS4_GPU_PREBUILT=1)"; return; fi
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

# tiny_one SIDE BACKEND TIER [TP]: `run` (greedy 32 tokens) and `score` (golden prompt) on BACKEND with
# `--experts-tier TIER`; outputs $LOGDIR/tiny_SIDE_BACKEND_TIER.{text,logits.f32,run.log,score.log}.
# TP > 1 (tag suffix _tpTP): `--tp TP` and no --experts-tier (each rank keeps its experts resident;
# the caching tiers are one rank only), so TIER must be resident.
tiny_one() {
  local tp="${4:-1}" tag="tiny_${1}_${2}_${3}" tier=(--experts-tier "$3")
  if (( tp > 1 )); then tag+="_tp$tp"; tier=(--tp "$tp"); fi
  step "$tag run" 90 "$LOGDIR/$tag.run.log" bash -c '"$@" > "'"$LOGDIR/$tag.text"'"' _ \
      "$DS4" run -m "$TINY" --backend "$2" "${tier[@]}" -p "The quick brown fox" -n 32 --temp 0 --ignore-eos \
    || return 1
  step "$tag score" 90 "$LOGDIR/$tag.score.log" \
      "$DS4" score -m "$TINY" --backend "$2" "${tier[@]}" --token-ids "$LOGDIR/tiny_ids.txt" \
      --logits-out "$LOGDIR/$tag.logits.f32"
}

# make_staged_plan MODEL PROFILE NGPU CTX SHARE VRAM_HI_GIB OUT (a step runs it as
# `gpu_check_model.sh staged-plan ...`: `timeout` needs a program): writes plan OUT (`plan --json`) for
# MODEL on NGPU GPUs that keeps about SHARE of the routed experts VRAM-resident and stages the rest
# from host memory: PROFILE (a hardware profile JSON) with its first GPU repeated NGPU times, no
# NVMe (a profile without GPUs gets configs/hw/1x2080ti-22g-pcie3.json's), CPU expert compute at 0.01 GB/s (so the planner stages rather than computes on the CPU,
# which the CUDA backend would do on the GPU anyway), and each GPU's VRAM found by bisection in
# (0, VRAM_HI_GIB] GiB (vram_reserved 0) until the resident share is within 0.1 of SHARE. Prints the
# cap and the experts per tier; status 1 when no cap gives both resident and staged experts.
make_staged_plan() {
  python3 - "$DS4" "$ROOT/configs/hw/1x2080ti-22g-pcie3.json" "$@" <<'PY'
import json, subprocess, sys
ds4, fallback, model, prof, ngpu, ctx, share, hi, out = sys.argv[1:10]
ngpu, share, hi = int(ngpu), float(share), float(hi)
p = json.load(open(prof))
if not p.get("gpus"):  # a profile probed without GPUs (a dry run): the RTX 2080 Ti entry stands in
    p["gpus"] = json.load(open(fallback))["gpus"]
p["gpus"] = [dict(p["gpus"][0]) for _ in range(ngpu)]
links = p.setdefault("links", {})  # a profile probed without GPUs has no H2D figures
for k, f in (("h2d_aggregate_gbps", 1.0), ("pageable_h2d_gbps", 0.9)):
    if not links.get(k):
        links[k] = f * sum(g.get("h2d_gbps", 11.5) for g in p["gpus"])
p.pop("nvme", None)
for n in p["numa_nodes"]:
    n["cpu_expert_gbps"] = {k: 0.01 for k in n.get("cpu_expert_gbps", {"default": 1})} or {"default": 0.01}
p.setdefault("runtime", {})["vram_reserved_mib"] = 0
hw = out + ".hw.json"
def resident_share(v):
    for g in p["gpus"]:
        g["vram_gib"] = v
    json.dump(p, open(hw, "w"), indent=1)
    r = subprocess.run([ds4, "plan", "-m", model, "--hw", hw, "--ctx", ctx, "--json", out], capture_output=True, text=True)
    if r.returncode != 0:
        return -1.0, {}
    t = "".join(l["tier"] for l in json.load(open(out))["layers"])
    counts = {c: t.count(c) for c in sorted(set(t))}
    return counts.get("V", 0) / max(1, len(t)), counts
lo, best = 0.0, None
for _ in range(16):
    v = (lo + hi) / 2
    s, counts = resident_share(v)
    if 0 < s < 1 and (best is None or abs(s - share) < abs(best[1] - share)):
        best = (v, s, counts)
    if best and abs(best[1] - share) <= 0.1:
        break
    if s < share: lo = v
    else: hi = v
if not best:
    print("no VRAM cap gave both resident and staged experts"); sys.exit(1)
v, s, counts = best
resident_share(v)  # leave the chosen plan in OUT
pred = json.load(open(out))["prediction"]
print(f"{ngpu} GPU(s) capped at {v:.4g} GiB VRAM each: experts per tier {counts} (resident share {s:.2f}); "
      f"plan predicts {pred.get('decode_tok_s', 0):.2f} tok/s, link {sum(pred['link_bytes_per_token']):.4g} B/tok")
PY
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
  # Every TP that fits: 2, 4 (8 exceeds the tiny model's 4 output groups) up to the GPU count.
  local tp b="$LOGDIR/tiny_b_${BACK_B}_resident" plan
  for tp in 2 4 8; do
    (( tp <= NGPU )) || continue
    if (( tp > 4 )); then sum "tp $tp: skipped (dsv4-tiny has 4 output groups: tp must divide 4)"; continue; fi
    a="$LOGDIR/tiny_a_${BACK_A}_resident_tp$tp"
    if tiny_one a "$BACK_A" resident "$tp" && [[ -s "$b.logits.f32" ]]; then
      if line=$(compare_runs "tp $tp experts resident" "$a.text" "$b.text" "$a.logits.f32" "$b.logits.f32" "$npos"); then
        sum "PASS $line"
      else
        sum "$line"; fail "tiny tp $tp compare" "$a.*"
      fi
    fi
    # A plan for tp GPUs that stages part of the experts (the CUDA backend stages at tp > 1).
    [[ "$BACK_A" == cuda ]] || continue
    plan="$LOGDIR/tiny_plan_tp$tp.json"
    if ! step "tiny plan tp $tp" 60 "$LOGDIR/tiny_plan_tp$tp.log" \
        bash "$ROOT/scripts/gpu_check_model.sh" staged-plan "$TINY" "$ROOT/configs/hw/1x2080ti-22g-pcie3.json" "$tp" 512 0.5 1 "$plan"; then continue; fi
    sum "tp $tp plan: $(tail -1 "$LOGDIR/tiny_plan_tp$tp.log")"
    a="$LOGDIR/tiny_a_${BACK_A}_plan_tp$tp"
    step "tiny tp $tp plan run" 90 "$a.run.log" bash -c '"$@" > "'"$a.text"'"' _ \
        "$DS4" run -m "$TINY" --backend "$BACK_A" --tp "$tp" --plan "$plan" -p "The quick brown fox" -n 32 --temp 0 \
        --ignore-eos || continue
    if cmp -s "$a.text" "$b.text"; then
      sum "PASS tp $tp experts staged by the plan: run greedy text equal to $BACK_B's"
    else
      sum "tp $tp experts staged by the plan: run greedy text DIFFERS"; fail "tiny tp $tp plan compare" "$a.text"
    fi
  done
  # tp 1 with experts a plan computes on the CPU beside the GPU (engine/moe_cpu_experts.cpp): the
  # staged plan with every other staged expert of each layer moved to tier C.
  [[ "$BACK_A" == cuda ]] || return 0
  plan="$LOGDIR/tiny_plan_cpu.json"
  step "tiny plan cpu experts" 60 "$LOGDIR/tiny_plan_cpu.log" \
      bash "$ROOT/scripts/gpu_check_model.sh" staged-plan "$TINY" "$ROOT/configs/hw/1x2080ti-22g-pcie3.json" 1 512 0.5 1 "$plan" \
    || return 0
  python3 - "$plan" <<'PY' >> "$LOGDIR/tiny_plan_cpu.log" || { sum "tiny plan cpu experts: could not rewrite the plan"; return 0; }
import json, sys
p = json.load(open(sys.argv[1])); moved = 0
for layer in p["layers"]:
    t = list(layer["tier"]); staged = [i for i, c in enumerate(t) if c not in "V"]
    for i in staged[::2]:
        t[i] = "C"; moved += 1
    layer["tier"] = "".join(t)
json.dump(p, open(sys.argv[1], "w"))
print(f"{moved} staged experts moved to the CPU")
PY
  sum "tp 1 cpu-expert plan: $(tail -1 "$LOGDIR/tiny_plan_cpu.log")"
  a="$LOGDIR/tiny_a_${BACK_A}_plan_cpu"
  step "tiny cpu experts run" 90 "$a.run.log" bash -c '"$@" > "'"$a.text"'"' _ \
      "$DS4" run -m "$TINY" --backend "$BACK_A" --plan "$plan" -p "The quick brown fox" -n 32 --temp 0 \
      --ignore-eos || return 0
  if cmp -s "$a.text" "$b.text"; then
    sum "PASS experts computed on the CPU beside the GPU (plan tier C): run greedy text equal to $BACK_B's"
  else
    sum "experts on the CPU beside the GPU: run greedy text DIFFERS"; fail "tiny cpu experts compare" "$a.text"
  fi
  # The same plan through bench: the CPU experts' host ms and the GPU's idle wait per token.
  local js="$LOGDIR/bench_tiny_cpu_experts.json"
  if step "bench tiny cpu experts" 90 "$LOGDIR/bench_tiny_cpu_experts.log" bash -c '"$@" > "'"$js"'"' _ \
      "$DS4" bench -m "$TINY" --backend "$BACK_A" --plan "$plan" -p 16 -n 16 -r 2 -o json; then
    links_summary "$js" >> "$SUMMARY" || fail "bench tiny cpu experts summary" "$js" "no decode row"
  fi
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
  # bench_t: the resident bench, and the staged one's probe + plan + bench after it.
  local s1 bytes1 n free_mib by_mem by_time by_disk left bench_t=330
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
  if (( n > 1 )); then make_shape "$n" $(( left + 20 > 60 ? left + 20 : 60 )) > /dev/null || return; fi
  local md="$LOGDIR/bench_shapes_$n.md"
  # shellcheck disable=SC2086  # SHAPE_BENCH_ARGS is a list of words
  if step "bench shapes ($n layers, $SHAPE_BACKEND)" "$bench_t" "$LOGDIR/bench_shapes_$n.log" bash -c '"$@" > "'"$md"'"' _ \
      "$DS4" bench -m "$LOGDIR/shapes_$n.gguf" --backend "$SHAPE_BACKEND" --experts-tier resident -c 1024 $SHAPE_BENCH_ARGS; then
    bench_summary "$md" >> "$SUMMARY" || fail "bench shapes summary" "$md" "rows not found"
  fi
  do_shapes_staged "$n"
}

# links_summary JSON_OUT: decode tok/s, overlap, cache and per GPU the measured bytes per token per tier
# beside the plan's prediction, from a `bench -o json` output (engine/cli/bench_links.h fields).
links_summary() {
  python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
tg = [r for r in j["results"] if r.get("n_gen", 0) > 0]
if not tg: print("no decode row"); sys.exit(1)
r = tg[-1]; p = r.get("plan") or {}
f = lambda x: "n/a" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x))
print(f"decode {r['test']}: {r['avg_ts']:.2f} tok/s measured, plan predicts {f(p.get('decode_tok_s'))} tok/s; "
      f"overlap {f(r.get('overlap'))} (copy {f(r.get('copy_ms_per_token'))} ms/tok, stall {f(r.get('stall_ms_per_token'))}, "
      f"host wait {f(r.get('host_wait_ms_per_token'))}); cache hits/misses {r.get('cache_hits')}/{r.get('cache_misses')}")
print(f"routed experts resident: measured {r['bytes_per_token_experts_resident']:.4g} B/tok, plan {f(p.get('vram_bytes_per_token_total'))}; "
      f"staged: measured {r['bytes_per_token_device_staged']:.4g} B/tok, plan {f(p.get('link_bytes_per_token_total'))}; "
      f"CPU: measured {r['bytes_per_token_experts_host']:.4g}, plan {f(p.get('cpu_bytes_per_token'))}; "
      f"NVMe: measured {r['bytes_per_token_nvme']:.4g}, plan {f(p.get('nvme_bytes_per_token'))}")
for k in r.get("ranks", []):
    print(f"  GPU {k['rank']}: resident {k['bytes_per_token_device_resident']:.4g} B/tok (plan experts {f(k.get('plan_vram_bytes_per_token'))}), "
          f"staged {k['bytes_per_token_device_staged']:.4g} / H2D {k['bytes_per_token_h2d_staged']:.4g} B/tok (plan {f(k.get('plan_link_bytes_per_token'))}), "
          f"copy {f(k.get('copy_ms_per_token'))} ms/tok, overlap {f(k.get('overlap'))}"
          + (f"; CPU experts {f(k['cpu_experts_ms_per_token'])} ms/tok on the host, GPU idle for them "
             f"{f(k.get('cpu_experts_gpu_idle_ms_per_token'))} ms/tok" if k.get('cpu_experts_ms_per_token') is not None else ""))
PY
}

# do_shapes_staged N: the N-layer synthetic model with a plan that stages part of the experts
# (make_staged_plan on this machine's probed profile, the GPUs' VRAM capped), benched at --tp SHAPE_TP.
do_shapes_staged() {
  local n="$1" g="$LOGDIR/shapes_$1.gguf" hw="$LOGDIR/hw_probed.json" plan="$LOGDIR/shapes_plan_$1.json" tot_gib
  sum ""; sum "== synthetic model, $n layers, experts staged by a plan (tp $SHAPE_TP, ~$VRAM_SHARE of the experts resident) =="
  if (( SHAPE_TP > NGPU )) && [[ "$SHAPE_BACKEND" == cuda ]]; then
    fail "shapes staged" "$LOGDIR" "DS4_SHAPE_TP $SHAPE_TP exceeds the $NGPU GPUs"; return
  fi
  # This machine's profile (memory, H2D per GPU; no NVMe file, no decode calibration); else the 2080 Ti one.
  if ! step "probe profile" 90 "$LOGDIR/probe_profile.log" "$DS4" plan --probe --probe-decode 0 --probe-nvme-mib 0 \
      --probe-mem-mib 64 --probe-h2d-mib 64 --write-profile "$hw"; then
    sum "  (probe failed: the 1x2080ti-22g-pcie3 profile's figures stand in)"; hw="$ROOT/configs/hw/1x2080ti-22g-pcie3.json"
  fi
  tot_gib=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(max([g.get('vram_gib', 0) for g in p.get('gpus', [])] + [24]))" "$hw")
  step "shapes plan" 120 "$LOGDIR/shapes_plan_$n.log" bash "$ROOT/scripts/gpu_check_model.sh" staged-plan "$g" "$hw" "$SHAPE_TP" 1024 "$VRAM_SHARE" "$tot_gib" "$plan" \
    || return
  sum "plan: $(tail -1 "$LOGDIR/shapes_plan_$n.log")"
  local js="$LOGDIR/bench_shapes_staged_$n.json"
  # shellcheck disable=SC2086  # SHAPE_STAGED_ARGS is a list of words
  if step "bench shapes staged ($n layers, tp $SHAPE_TP)" 150 "$LOGDIR/bench_shapes_staged_$n.log" bash -c '"$@" > "'"$js"'"' _ \
      "$DS4" bench -m "$g" --backend "$SHAPE_BACKEND" --tp "$SHAPE_TP" --plan "$plan" -c 1024 $SHAPE_STAGED_ARGS -o json; then
    links_summary "$js" >> "$SUMMARY" || fail "bench shapes staged summary" "$js" "no decode row"
    overhead_fit "$js" "$plan.hw.json" "$n" >> "$SUMMARY"
  fi
}

# overhead_fit JSON_OUT PROFILE N: the planner's per-layer fixed cost re-fitted from a staged bench:
# runtime.layer_overhead_us such that the plan's decode prediction equals the measurement, i.e. the
# profile's value + (1 / measured tok/s - 1 / predicted tok/s) / N layers (the head and embedding,
# small here, are folded into the layers). Printed, not written: a profile for this GPU takes it.
overhead_fit() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); hw = json.load(open(sys.argv[2])); n = int(sys.argv[3])
r = [x for x in j["results"] if x.get("n_gen", 0) > 0][-1]
pred = (r.get("plan") or {}).get("decode_tok_s")
old = hw.get("runtime", {}).get("layer_overhead_us", 0.0)
if not pred or not r.get("avg_ts"):
    print("layer_overhead_us fit: no prediction or measurement"); sys.exit(0)
fit = old + (1.0 / r["avg_ts"] - 1.0 / pred) * 1e6 / n
print(f"layer_overhead_us fit: {fit:.0f} us (profile {old:g}; measured {r['avg_ts']:.1f} tok/s vs predicted {pred:.1f} over {n} layer(s))")
PY
}

# `gpu_check_model.sh compare LABEL TEXT_A TEXT_B LOGITS_A LOGITS_B NPOS` runs only the comparison.
# `gpu_check_model.sh bench-summary MD` prints only the bench figures of a `bench -o md` output.
if [[ "${1:-}" == compare ]]; then shift; compare_runs "$@"; exit $?; fi
if [[ "${1:-}" == bench-summary ]]; then bench_summary "$2"; exit $?; fi
# `gpu_check_model.sh links-summary JSON` prints only the link figures of a `bench -o json` output.
if [[ "${1:-}" == links-summary ]]; then links_summary "$2"; exit $?; fi
# `gpu_check_model.sh staged-plan MODEL PROFILE NGPU CTX SHARE VRAM_HI_GIB OUT` makes only the plan.
if [[ "${1:-}" == staged-plan ]]; then shift; make_staged_plan "$@"; exit $?; fi
for s in build conformance tiny shapes; do
  if has_step "$s"; then say "step $s"; "do_$s"; fi
done
exit $FAILED
