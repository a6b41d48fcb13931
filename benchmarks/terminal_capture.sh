#!/usr/bin/env bash
# Captured screens of `cudagent bench` and `cudagent optimize` in a real terminal (tmux, 110x30): the progress bar
# and the live panel on stderr, as a user sees them mid-run and at the end. The optimize run talks to the scripted
# model server of the tests (the axpby C++ solution written, compiled, verified; then finish), on the CPU.
#   benchmarks/terminal_capture.sh  -> benchmarks/results/terminal-bench.txt, terminal-optimize.txt
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
tmp=$(mktemp -d)
export CUDAGENT_HOME="$tmp/home" PYTHONWARNINGS=ignore
snap() { tmux capture-pane -p -t "$1" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'; }
wait_for() { for _ in $(seq 1 "$3"); do tmux capture-pane -p -t "$1" | grep -q "$2" && return 0; sleep 1; done; return 1; }

tmux kill-server 2>/dev/null || true
tmux new-session -d -s bench -x 110 -y 30
tmux new-session -d -s opt -x 110 -y 30
tmux send-keys -t bench "export PATH='$PATH' PS1='$ '; clear" Enter
printf 'axpby\nmatmul\nrow_sum\n' > "$tmp/list"  # one solved task, two without a CPU solution: minutes, not an hour
tmux send-keys -t bench "cudagent bench examples/tasks --solutions examples/solutions/cpu --device cpu --list $tmp/list --out $tmp/bench; echo EXIT=\$?" Enter
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores; tmux 110x30"
  echo "\$ cudagent bench examples/tasks --solutions examples/solutions/cpu --device cpu --list LIST --out OUT"
  wait_for bench "tasks, time left" 300 && { sleep 5; echo "## mid-run"; snap bench; }
  wait_for bench "^EXIT=[0-9]" 1800; echo "## at the end"; snap bench
} > "$out/terminal-bench.txt"

python3 - "$tmp" <<'PY' &
import sys, time
sys.path.insert(0, ".")
from tests.agent.episodes import FINISH, SOLVE
from tests.agent.script_server import ScriptedServer, from_list
steps = [dict(s) for s in SOLVE] + [FINISH]
steps[3] = {**steps[3], "sleep": 2}  # a model that takes a moment, so the panel shows it thinking
with ScriptedServer(from_list(steps)) as server:
    open(sys.argv[1] + "/url", "w").write(server.url)
    time.sleep(900)
PY
server=$!
for _ in $(seq 1 30); do [ -f "$tmp/url" ] && break; sleep 0.5; done
cp examples/tasks/axpby.py "$tmp/axpby.py"
tmux send-keys -t opt "export PATH='$PATH' PS1='$ '; clear" Enter
tmux send-keys -t opt "OPENAI_BASE_URL=$(cat "$tmp/url") OPENAI_API_KEY=x cudagent optimize $tmp/axpby.py --device cpu --no-final-check; echo EXIT=\$?" Enter
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores; tmux 110x30; a scripted model server"
  echo "\$ cudagent optimize axpby.py --device cpu --no-final-check"
  wait_for opt "compile" 300 && { sleep 3; echo "## mid-run (building)"; snap opt; }
  wait_for opt "^EXIT=[0-9]" 900; echo "## at the end"; snap opt
} | sed -e "s#$tmp#/tmp/...#g" > "$out/terminal-optimize.txt"
kill $server 2>/dev/null || true
tmux kill-server 2>/dev/null || true
sed -i -e "s#$tmp#/tmp/...#g" "$out/terminal-bench.txt"
rm -rf "$tmp"
