"""The device kernels run on, and how the processes that work on one device share it.

info.py     the device (CUDA or the CPU) and the facts builds, timing and caches depend on
share.py    a reader-writer lock among processes and threads: work shares the device, a timing has it alone
memory.py   device memory reserved among the processes sharing a GPU, so tasks that do not fit take turns
"""
