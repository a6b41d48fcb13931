#!/usr/bin/env bash
# The whole test suite RUNS times in a row (default 3) beside a busy loop that keeps one core spinning, each run from
# a cold cache (as CI starts), to show that no test is flaky under load; then the per-directory times.
#   benchmarks/suite_beside_load.sh [RUNS]   -> benchmarks/results/suite/beside-load-run{1..RUNS}.log, beside-load.md
set -u
cd "$(dirname "$0")/.."
runs="${1:-3}"
out=benchmarks/results/suite
mkdir -p "$out"
python3 -c 'while True: pass' &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
logs=()
for i in $(seq 1 "$runs"); do
  log="$out/beside-load-run$i.log"
  cache=$(mktemp -d)
  {
    echo "# run $i of $runs, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD), $(nproc) cores, a busy loop (pid $busy) beside it"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$log"
  CUDAGENT_CACHE_DIR="$cache" python -m pytest -q -n 2 --durations=0 -p no:cacheprovider >> "$log" 2>&1
  echo "# exit $? ; load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"
  rm -rf "$cache"
  logs+=("$log")
done
python3 benchmarks/suite_durations.py "${logs[@]}" --out "$out/beside-load.md" | tail -12
