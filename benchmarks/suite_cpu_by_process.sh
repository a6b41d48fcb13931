#!/usr/bin/env bash
# Where the test suite's CPU goes, by kind of process: sample the running processes once a second while the suite
# runs, then count how many of each kind were on a CPU on average (2.0 = both cores of a two-core machine busy).
#
#   benchmarks/suite_cpu_by_process.sh sample SAMPLES.log &     # beside `python -m pytest -q -n 2`; kill it after
#   benchmarks/suite_cpu_by_process.sh summarize SAMPLES.log     # the average of each kind, busiest first
set -euo pipefail
case "${1:-}" in
  sample)
    while true; do
      ps -eo stat=,comm=,args= | awk '$1 ~ /^R/ {a=$3; for (i=4; i<=NF && i<=8; i++) a=a" "$i; print $2" | "substr(a,1,160)}' >> "$2"
      echo "--" >> "$2"
      sleep 1
    done ;;
  summarize)
    awk '/^--$/ {n++; next}
      /^ps |^awk|^sh |^suite_cpu_by/ {next}
      { c = "other (kernel threads, Ray, verl, helper scripts)"
        if ($0 ~ /jail.zygote|jail.entry|usermodel.prove|jail.probe/) c = "evaluator children (jailed: task check, verify, timing, proof, builds)"
        else if ($0 ~ /^cc1plus/ && $0 ~ / -E /) c = "C++ preprocessing (object-cache keys, expanded audit)"
        else if ($0 ~ /^cc1plus|^ld |^as |^collect2/) c = "C++ compile and link"
        else if ($0 ~ /toolchain.objcache/) c = "object-cache wrapper (python)"
        else if ($0 ~ /-u -c import/) c = "pytest-xdist workers (the tests themselves)"
        else if ($0 ~ /-m cudagent/) c = "cudagent CLI processes the tests start"
        else if ($0 ~ /transformers/) c = "model server (transformers serve)"
        s[c]++ }
      END { for (k in s) printf "%.2f\t%s\n", s[k] / n, k; printf "%d\tsamples (seconds)\n", n }' "$2" | sort -rn ;;
  *) echo "usage: $0 sample|summarize SAMPLES.log" >&2; exit 2 ;;
esac
