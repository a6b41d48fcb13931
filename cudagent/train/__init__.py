"""`cudagent train`: the paper's four stages on verl 0.9.1 and Ray, with the loop, tools and reward of `optimize`.

Only `agent_loop.py` and `verl_config.py` (and what verl itself loads from the stage configs) import verl; the rest
of this package, and every other part of cudagent, must import without it (`pip install cudagent` stays light;
`pip install "cudagent[train]"` adds verl). tests/test_layout.py holds that line.
"""
