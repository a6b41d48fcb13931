"""`cudagent bench`: many tasks, scored by the same evaluator, across the local GPUs.

tasks.py     find the tasks (a KernelBench checkout's level folders, or any folder) and their solutions
runner.py    one worker per GPU, each task in its own process with a timeout; results appended as they finish
report.py    per level and overall: pass rate, fast_p against eager and torch.compile, geomean speedups
"""
