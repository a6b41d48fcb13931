"""The agent: a ReAct loop that drives a policy through tool calls in a workspace, judged by the evaluator.

policy.py         the Policy protocol the loop calls (chat today, token-level for training later)
openai_policy.py  an OpenAI-compatible chat implementation: native tool calls, fallbacks, retries
actions.py        the text action format for servers without tool calls
tools.py          the tools: bash, files, compile, verify, profile, finish
prompting.py      jinja2 prompts and skill packs
gitrun.py         the run's branch: a worktree of the user's repo, or a repo of its own
trajectory.py     the run directory: the full history, written after every turn, and resume
loop.py           the loop itself: turns, limits, elision, commits, the final re-evaluation
"""
