"""A run on disk: run.json (record), one writer and a checked resume (guards), parquet tables,
checkpoints, kept completions, metric tracking, the end-of-run summary, loading the task and policy
a run starts from, and standalone evaluation of its checkpoints."""
