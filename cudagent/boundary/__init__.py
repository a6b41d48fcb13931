"""The agent's side of the boundary: every door by which a model's text reaches this machine, each with one way in.

    shell.py      a command a model wrote: bubblewrap with a view of the system and the toolchain, the workspace
                  writable; an allow-listed environment; nothing it starts outlives it (every mode)
    bwrap.py      the engine: a bubblewrap command line for a View (an allow-list of paths), shared with the
                  candidate's jail (evaluator/jail/)
    paths.py      a path a model named: opened beneath its folder, one component at a time, never through a link;
                  files written through exclusive temporary files
    git.py        every git command cudagent runs: a named repository, plumbing only, objects written by cudagent,
                  configuration that runs no program; never the workspace's own repositories
    terminal.py   model text printed for a person: control characters shown, never interpreted

The candidate's code has its own boundary, the evaluator's jail (cudagent/evaluator/jail/); `cudagent serve` runs a
client's task only there (serve/worker.py). What each door lets through is the security table of docs/security.md
(docs: "What the model's shell, tools, git and serve can do"), each line naming the test that shows it.
"""
