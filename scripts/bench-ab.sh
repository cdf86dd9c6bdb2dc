#!/usr/bin/env bash
# Interleaved A/B comparison of two Skua builds, with the statistics (issue 35: a comparison of
# builds in docs/benchmarks.md comes from this command, not from hand-run interleavings).
#
#   scripts/bench-ab.sh A B SCENARIO [skua-bench args...]
#   scripts/bench-ab.sh 4993267 HEAD fanout --subscribers 100 --rate 1000
#   PAIRS=25 METRIC=server_cpu_us_per_msg scripts/bench-ab.sh main mybranch pairs --topics 500
#
# A and B are git revisions or paths to skua binaries. A revision is built in release, one at a
# time, in a temporary worktree that shares this checkout's target directory (no second
# target/); its `skua` is kept as $CARGO_TARGET_DIR/bench-ab/<commit>/skua, so a later run
# reuses it. One skua-bench (this checkout's, release; BENCH_BIN overrides) drives both, so the
# load generator is the same on both sides.
#
# It runs PAIRS pairs (default 10). Each run is `skua-bench SCENARIO --spawn-skua <build> ARGS
# --json FILE`: a fresh server per run. The order alternates (A B, B A, A B, ...) so a drift of
# the machine (other work, thermal) falls on both sides alike. Per pair it takes METRIC (a field
# of the bench's JSON line, default server_cpu_us_per_msg; lower is better for the CPU and
# latency fields) and the relative change B/A - 1. It prints every pair, the mean of each side,
# and the mean change with its 95 % interval (Student t over the pairs), then one JSON line
# (also appended to BENCH_AB_OUT, default target/bench/ab.jsonl).
#
# A_ARGS / B_ARGS add bench arguments to one side only (split on spaces): the same build with
# and without a feature, e.g. `B_ARGS=--triggers scripts/bench-ab.sh HEAD HEAD fanout ...`
# gives the cost of a trigger on every publish, interleaved.
#
# Environment: PAIRS=10, METRIC=server_cpu_us_per_msg, BENCH_DURATION=10, BENCH_WARMUP=2,
# A_ARGS, B_ARGS, BENCH_BIN (a skua-bench binary; default: build this checkout's), BENCH_AB_OUT.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 3 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
a_spec=$1
b_spec=$2
shift 2
scenario=$1
shift
pairs=${PAIRS:-10}
metric=${METRIC:-server_cpu_us_per_msg}
out=${BENCH_AB_OUT:-target/bench/ab.jsonl}
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The skua binary of a revision or a path, built when missing.
build_of() {
  local spec=$1
  if [ -x "$spec" ] && [ -f "$spec" ]; then
    realpath "$spec"
    return
  fi
  local commit
  commit=$(git rev-parse --verify --quiet "$spec^{commit}") || { echo "bench-ab: $spec is neither a binary nor a revision" >&2; exit 2; }
  local keep="$target/bench-ab/$commit"
  if [ ! -x "$keep/skua" ]; then
    local tree="$work/tree-$commit"
    echo "bench-ab: building skua at $commit (release)" >&2
    git worktree add --detach --quiet "$tree" "$commit"
    (cd "$tree" && CARGO_TARGET_DIR="$target" cargo build --quiet --release -p skua-server) >&2
    mkdir -p "$keep"
    cp "$target/release/skua" "$keep/skua"
    git worktree remove --force "$tree"
  fi
  echo "$keep/skua"
}

a_bin=$(build_of "$a_spec")
b_bin=$(build_of "$b_spec")
if [ -n "${BENCH_BIN:-}" ]; then
  bench=$BENCH_BIN
else
  cargo build --quiet --release -p skua-bench
  bench="$target/release/skua-bench"
fi
ulimit -n "$(ulimit -Hn)"

# One run of `bin`; prints the metric.
run() {
  local label=$1 bin=$2 json="$work/run.json"
  shift 2
  : >"$json"
  "$bench" "$scenario" --spawn-skua "$bin" --duration "${BENCH_DURATION:-10}" --warmup "${BENCH_WARMUP:-2}" \
    --label "$label" --json "$json" "$@" >"$work/run.log" 2>&1 \
    || { echo "bench-ab: the $label run failed:" >&2; tail -n 20 "$work/run.log" >&2; exit 1; }
  python3 - "$json" "$metric" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
value = rows[-1].get(sys.argv[2]) if rows else None
if not isinstance(value, (int, float)):
    sys.exit(f"bench-ab: no numeric {sys.argv[2]!r} in the bench's JSON line: {rows[-1] if rows else 'none'}")
print(value)
EOF
}

: >"$work/pairs"
echo "bench-ab: $pairs pairs of '$scenario $*', metric $metric; A = $a_spec ${A_ARGS:-}, B = $b_spec ${B_ARGS:-}" >&2
read -r -a a_args <<<"${A_ARGS:-}"
read -r -a b_args <<<"${B_ARGS:-}"
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then
    a=$(run A "$a_bin" "$@" "${a_args[@]}")
    b=$(run B "$b_bin" "$@" "${b_args[@]}")
  else
    b=$(run B "$b_bin" "$@" "${b_args[@]}")
    a=$(run A "$a_bin" "$@" "${a_args[@]}")
  fi
  echo "$a $b" >>"$work/pairs"
  echo "pair $i: A $a  B $b" >&2
done

mkdir -p "$(dirname "$out")"
python3 - "$work/pairs" "$metric" "$a_spec ${A_ARGS:-}" "$b_spec ${B_ARGS:-}" "$scenario $*" "$out" <<'EOF'
import json, math, statistics, sys
path, metric, a_spec, b_spec, case, out = (a.strip() for a in sys.argv[1:])
pairs = [tuple(map(float, l.split())) for l in open(path) if l.strip()]
changes = [b / a - 1 for a, b in pairs if a != 0]
n = len(changes)
# Two-sided 95 % Student t quantiles for n - 1 degrees of freedom (1..30), then the normal one.
T = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
     2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
     2.045, 2.042]
mean = statistics.fmean(changes) if n else float("nan")
half = T[min(n - 2, len(T) - 1)] * statistics.stdev(changes) / math.sqrt(n) if n >= 2 else float("nan")
summary = {
    "case": case, "metric": metric, "a": a_spec, "b": b_spec, "pairs": n,
    "a_mean": statistics.fmean(a for a, _ in pairs), "b_mean": statistics.fmean(b for _, b in pairs),
    "change": mean, "change_ci95": [mean - half, mean + half],
}
print(f"A {a_spec}: mean {summary['a_mean']:.4g}   B {b_spec}: mean {summary['b_mean']:.4g}")
print(f"B vs A: {100 * mean:+.1f} % (95 % interval {100 * (mean - half):+.1f} to {100 * (mean + half):+.1f} %, "
      f"{n} interleaved pairs, {metric})")
print(json.dumps(summary))
with open(out, "a") as f:
    f.write(json.dumps(summary) + "\n")
EOF
