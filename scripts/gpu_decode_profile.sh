#!/usr/bin/env bash
# scripts/gpu_decode_profile.sh — where one decode step's time goes on a CUDA GPU (no nsys needed):
#   1. `bench -p 16 -n 64` with --cuda-graphs on and off: decode tok/s, so ms per token (wall);
#   2. Nsight Compute (ncu --clock-control none, metric gpu__time_duration.sum) over `run` with
#      -n N1 and -n N2 generated tokens, graphs off: the difference of the two runs divided by N2 - N1
#      is one decode step's kernels (load and prefill cancel): launches per token, GPU time per token
#      and the kernels that take it. Wall minus GPU time is the host side (launch calls, waits,
#      copies and gaps between kernels).
# Usage: scripts/gpu_decode_profile.sh MODEL [OUTDIR]
# Env: DS4 (binary), DS4_PROFILE_TOKENS (default "2 10"), DS4_PROFILE_BACKEND (default cuda; cpu tests the script).
# Prints a short table; the ncu CSVs stay in OUTDIR (default $OUT or /tmp/ds4-decode-profile).
set -u -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:?usage: gpu_decode_profile.sh MODEL [OUTDIR]}"
OUTD="${2:-${OUT:-/tmp/ds4-decode-profile}}"
DS4="${DS4:-$ROOT/build-gpu/engine/ds4-offload}"
read -r N1 N2 <<< "${DS4_PROFILE_TOKENS:-2 10}"
if ! [[ "$N1" =~ ^[0-9]+$ && "${N2:-}" =~ ^[0-9]+$ ]] || (( N1 < 1 || N2 <= N1 )); then
  echo "gpu_decode_profile: DS4_PROFILE_TOKENS: expected two token counts 'N1 N2' with 1 <= N1 < N2, found '${DS4_PROFILE_TOKENS:-}'" >&2
  exit 1
fi
[[ -s "$MODEL" ]] || { echo "gpu_decode_profile: model '$MODEL' not found" >&2; exit 1; }
[[ -x "$DS4" ]] || { echo "gpu_decode_profile: ds4-offload not found at $DS4 (set DS4)" >&2; exit 1; }
BACKEND="${DS4_PROFILE_BACKEND:-cuda}"
mkdir -p "$OUTD"
NCU="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2> /dev/null | head -1)"

ok=0
for g in on off; do
  timeout 120 "$DS4" bench -m "$MODEL" --backend "$BACKEND" --experts-tier resident -p 16 -n 64 -r 2 --cuda-graphs "$g" \
      -o json > "$OUTD/bench_graphs_$g.json" 2> "$OUTD/bench_graphs_$g.log" && ok=1 \
    || echo "bench --cuda-graphs $g failed: $(tail -2 "$OUTD/bench_graphs_$g.log")"
done
if [[ -z "$NCU" ]]; then echo "ncu not found: no kernel breakdown"; fi
for n in $N1 $N2; do
  [[ -n "$NCU" ]] || break
  timeout 200 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUTD/ncu_n$n.csv" \
      "$DS4" run -m "$MODEL" --backend "$BACKEND" --experts-tier resident -p "The quick brown fox" -n "$n" --temp 0 --ignore-eos \
      --cuda-graphs off > "$OUTD/ncu_run_n$n.log" 2>&1 || echo "ncu over run -n $n failed: $(tail -3 "$OUTD/ncu_run_n$n.log")"
done
python3 - "$OUTD" "$N1" "$N2" <<'PY'
import csv, json, os, sys, collections
d, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for g in ("on", "off"):
    try:
        r = [x for x in json.load(open(f"{d}/bench_graphs_{g}.json"))["results"] if x.get("n_gen", 0) > 0][-1]
        print(f"bench --cuda-graphs {g}: {r['test']} {r['avg_ts']:.2f} tok/s = {1000 / r['avg_ts']:.3f} ms/token")
    except Exception as e:
        print(f"bench --cuda-graphs {g}: no result ({e})")
def load(n):
    k = collections.defaultdict(lambda: [0, 0.0])
    p = f"{d}/ncu_n{n}.csv"
    if not os.path.exists(p): return None
    rows = [l for l in open(p) if l.startswith('"')]
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum": continue
        v = float(row["Metric Value"].replace(",", ""))
        us = v / 1000 if row.get("Metric Unit") in ("nsecond", "ns") else (v * 1000 if row.get("Metric Unit") in ("msecond", "ms") else v)
        name = row["Kernel Name"].split("(")[0].split("<")[0]
        k[name][0] += 1; k[name][1] += us
    return k
a, b = load(n1), load(n2)
if a is None or b is None:
    print("no ncu data"); sys.exit(0)
steps = n2 - n1
diff = {n: (b[n][0] - a.get(n, [0, 0])[0], b[n][1] - a.get(n, [0, 0])[1]) for n in b}
launches = sum(c for c, _ in diff.values()) / steps
gpu_us = sum(t for _, t in diff.values()) / steps
print(f"one decode step (ncu, run -n {n2} minus -n {n1}): {launches:.0f} kernel launches, {gpu_us:.0f} us of kernel time")
print(f"{'kernel':40s} {'launches/tok':>12s} {'us/tok':>9s} {'us/launch':>9s}")
for n, (c, t) in sorted(diff.items(), key=lambda x: -x[1][1])[:25]:
    if c <= 0: continue
    print(f"{n[:40]:40s} {c / steps:12.1f} {t / steps:9.1f} {t / c:9.2f}")
PY
(( ok )) || { echo "gpu_decode_profile: no bench result" >&2; exit 1; }
