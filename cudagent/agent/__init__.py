"""The agent: an episode (the environment) that drivers step, and the recorders that keep what it produced.
Where the model's text reaches this machine (its shell, the paths its tools open, the run's git, the terminal)
lives in cudagent/boundary/.

environment.py     open_episode: the one way an episode is opened (task, workspace, evaluator port, limits)
episode.py         the episode core: opening, act, stop_reason, finish; limits, state, the result
best.py            the best verified kernel, and when a new one is better
tools.py           the tools: bash, files, compile, verify, profile, finish (evaluation through the evaluator port)
arguments.py       a tool call's arguments checked against the tool's schema
chat_driver.py     steps an episode with a chat policy (optimize, bench): elision, replies, recorders
context.py         what of the history fits the model's context window (a token estimate, elision)
token_driver.py    steps an episode with a token backend (training, token mode): the exact token ledger
policy.py          the chat Policy protocol; openai_policy.py, its OpenAI-compatible implementation
backends.py        token backends: Hugging Face transformers, a vLLM server, scripted replies
renderer.py        messages to token ids with the model's chat template, appending only what is new
ledger.py          prompt ids, response ids, response mask, log-probabilities
actions.py         the text action format (and parsing calls out of sampled text)
recorders.py       git (per-turn commits, trailers, the best tag), the trajectory, UI events, memory
ui.py              what a person or a program sees of a run while it goes (live panel, lines, JSON events)
runner.py          `optimize` runs: set up, resume, drive; token_run.py, the same in token mode
prompting.py       jinja2 prompts and skill packs
gitrun.py          the run's branch: a worktree of the user's repo, or a repo of its own (git through boundary/)
trajectory.py      the run directory: the full history, written after every turn, and resume
export.py          `cudagent export`: a run's kernel as a package that needs nothing from cudagent
"""
