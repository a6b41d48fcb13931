"""The jail: where code a model wrote is built and run, so that it cannot leave, outlive its evaluation, or touch a
neighbour. The trust boundary of the evaluator, in one place.

Three layers, each closing whole classes of escape where they enter:

    process tree   keeper.py     every candidate process is process 1 of a PID namespace of its own (or, without
                                 bubblewrap, the child of a subreaper): whatever it starts ends with it; memory and
                                 process count of the whole tree watched (jail/process.py)
    outer          bwrap         bubblewrap (cudagent/boundary/bwrap.py, an engine shared with the agent's shell):
                                 its own namespaces (PID, mount, network, IPC, UTS, user where it runs unprivileged),
                                 a file system view that lists what it may read (the system, Python, CUDA, the
                                 hand-ins) and nothing else, its own /proc, /tmp and /dev
    inner          confine.py    Landlock (files read-only but its scratch, TCP, abstract sockets, signals) and
                   privileges.py seccomp (sockets, connect, ptrace, io_uring, signals to other processes), every
                                 capability dropped

    level.py       how strong the jail is on this machine, decided once by a trusted probe (probe.py)
    cell.py        one evaluator's candidates: the machine's jail and the read-only hand-ins of its evaluations
    compiler.py    the builds' jail: compilers see the toolchain, torch, CUDA and the workspace, and a clean env
    zygote.py      the fork server, itself inside the jail, forking one kept process per candidate
    process.py     the evaluator's handle on a candidate process (and on the trusted reference worker)
    entry.py       the first code of a jailed process: keeper, privileges, confinement, then the harness

entry.py and what it imports (keeper, confine, privileges) import nothing heavy: a candidate's process enters its
jail before torch starts a thread.
"""
