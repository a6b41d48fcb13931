#!/usr/bin/env bash
# A newcomer's first hour, replayed: a clean clone of this repository, the README's quickstart (the whole loop,
# played from a recorded episode) and its "Your own model" commands on the CPU (a model run played the same way),
# then the README's real-model recipe (SmolLM2-135M served by `transformers serve`).
# Every command is printed with its exit code and wall time.
#   benchmarks/walkthrough.sh [OUT]      (default benchmarks/results/walkthrough/transcript.txt)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/benchmarks/results/walkthrough/transcript.txt}"
mkdir -p "$(dirname "$OUT")"
WORK="$(mktemp -d -p "$HOME")"  # not under /tmp, which a candidate's jail replaces
export CUDAGENT_HOME="$WORK/home" CUDAGENT_CACHE_DIR="$WORK/cache" PIP_DISABLE_PIP_VERSION_CHECK=1
unset OPENAI_BASE_URL OPENAI_API_KEY
exec > >(tee "$OUT") 2>&1

step() {  # step TITLE COMMAND...: run it in the clone, print what a newcomer sees, its exit code and wall time
  local title="$1"; shift
  echo; echo "### $title"; echo "\$ $*"
  local start=$(date +%s.%N)
  (cd "$WORK/clone" && bash -c "$*" 2>&1 | grep -v "^WARNING: Location\|Loading weights\|Writing model shards\|de-quantizing" | tail -n "${TAIL:-25}")
  local code=${PIPESTATUS[0]}
  printf '[exit %s, %.1f s]\n' "$code" "$(echo "$(date +%s.%N) - $start" | bc)"
}

echo "# walkthrough of $(git -C "$ROOT" rev-parse --short HEAD) on $(date -u +%Y-%m-%dT%H:%M:%SZ): $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $(python3 --version)"
git clone -q "$ROOT" "$WORK/clone"

# The README's Quickstart: its first command, verbatim
TAIL=30 step "Quickstart: install, then the whole loop on the CPU with no model server (a replay), and its log" "$(grep -m1 '^python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e . &&' "$WORK/clone/README.md")"
A=". .venv/bin/activate &&"
TAIL=45 step "... one turn with its diff, as a reviewer reads it" "$A cudagent show last 6"
step "... the run's branch, with ordinary git" "git log --format='%h %s' \$(git branch --list 'cudagent/*' --format='%(refname:short)' | tail -1) | head -8"
step "... the same check, timed against eager and torch.compile (each phase told as it starts)" "$A cudagent check examples/tasks/softmax.py examples/solutions/cpu/softmax --device cpu"
step "Your own model: where its time goes, by fusion regions" "$A cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu"
step "... by modules" "$A cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --modules"
step "... at an 80-column width" "$A COLUMNS=80 cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --top 6"
step "... its spots as tasks (--tasks counts tasks written)" "$A cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --modules --tasks 2 --out \$CUDAGENT_HOME/h"
TAIL=20 step "a model run played from the replay: the put-back, the proof and report.md, no model server" "$A $(sed -n '/^cudagent optimize examples\/models\/block.py:Stack/,/--device cpu/p' "$WORK/clone/README.md" | tr -d '\\\n' | sed 's/#.*//')"
step "... its report" "$A cat \$(ls -td \$CUDAGENT_HOME/runs/stack-*/ | head -1)report.md"
step "a mistyped input shape" "$A cudagent hotspots examples/models/block.py:Stack --inputs 'x=f32[8,,256]' --device cpu"
step "optimize with no model server configured" "$A cudagent optimize examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --top 1"
step "optimize with a server address where nothing listens" "$A OPENAI_BASE_URL=http://127.0.0.1:9/v1 cudagent optimize examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --top 1"
step "a CUDA solution checked on the CPU" "$A cudagent check examples/tasks/softmax.py examples/solutions/cuda/softmax --device cpu --no-timing"

# The README's no-API path: SmolLM2-135M served on the CPU
block=$(sed -n '/^pip install "transformers\[serving\]" gguf/,/^OPENAI_BASE_URL=/p' "$WORK/clone/README.md")
step "the no-API path: install the local model's pieces" "$A $(echo "$block" | sed -n 1p)"
step "... convert SmolLM2 to a Hugging Face folder" "$A $(echo "$block" | sed -n 2p) && $(echo "$block" | sed -n 3p)"
# the README's server line, as written there
serve=$(grep -m1 '^HF_HUB_OFFLINE=1 HF_HUB_CACHE=' "$WORK/clone/README.md" | sed 's/ &$//')
(cd "$WORK/clone" && . .venv/bin/activate && mkdir -p hf-hub && eval "$serve" >"$WORK/serve.log" 2>&1) &
SERVER=$!
for _ in $(seq 120); do curl -sf http://127.0.0.1:8765/v1/models >/dev/null && break; sleep 1; done
step "... the server answers" "curl -s http://127.0.0.1:8765/v1/models | head -c 300; echo"
S="OPENAI_BASE_URL=http://127.0.0.1:8765/v1"
step "doctor, with the server" "$A $S cudagent doctor --device cpu --model \$PWD/smollm2"
TAIL=40 step "optimize your own model with the local model (one spot, three turns)" "$A $S cudagent optimize examples/models/block.py:Stack --inputs 'x=f32[8,64,256]' --device cpu --top 1 --model \$PWD/smollm2 --max-turns 3 --reply-tokens 96 --context-tokens 8192 --no-final-check"
step "the runs" "$A cudagent runs"
step "the model run's log" "$A cudagent log \$(ls -t \$CUDAGENT_HOME/runs | grep -m1 stack-)"
step "a spot's own turns" "$A cudagent log last"
echo; echo "### the model server's log (its last lines)"; grep -v "^INFO\|it/s\]" "$WORK/serve.log" | tail -n 8
pkill -f "transformers serve .*$WORK" 2>/dev/null; kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
echo; echo "# done: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rm -rf "$WORK"
