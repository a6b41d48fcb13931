"""Task datasets (`cudagent data`): seed operators (ops.py), tasks composed from them (compose.py), the filters that
decide what a dataset keeps (filters.py, check_worker.py, similarity.py) and the pipeline that runs them
(pipeline.py, report.py)."""
