"""Honest timing: one clock for every target, outside the candidate's process, clean baselines, checks on every sample.

parent_clock.py the reward's clock: the evaluator's own, around checked batches of calls, for all three targets
measure.py      the in-process timing loop (events behind a GPU-side lead, L2 flush, rotated input sets, kept outputs)
baselines.py    eager and torch.compile timed in clean processes that never import candidate code
profile.py      the candidate's timing, its checks (clock, kernel sum, floor, interference) and the tier
peaks.py, peak_rates.py, roofline.py   the device's measured peaks and a task's cost
ncu.py          an Nsight Compute summary of the candidate's kernels
"""
