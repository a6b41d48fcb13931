"""Building a workspace's extension module, fast and without loading it.

extension.py   the incremental ninja build of `cuda_extension` (never imports what it builds)
objcache.py    the machine's compiler cache for the C++ units (run by ninja as
               `python -m cudagent.evaluator.toolchain.objcache`)
manifest.py    the cache's direct lookups: a unit found from its source and the files it read, unpreprocessed
pch.py         precompiled torch headers for the units the cache misses
"""
