"""The audits: what a candidate may contain and do, judged before and while it runs.

static_audit.py   model_new.py's syntax tree (imports, introspection, fallbacks, monkey-patching...)
kernel_scan.py    the kernel sources (ATen compute, dispatcher bypasses, streams, threads, files...)
link_audit.py     the symbols a built library takes from other libraries
runtime_audit.py  in the candidate's process: every op dispatched, every kernel launched, own code called
op_policy.py      which ops a candidate may dispatch (allocation, views, metadata)
nullcheck.py      null candidates (zeros, the mean, passthrough...) that pass a degenerate task
"""
