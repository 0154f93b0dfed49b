"""A run on disk: run.json (record), one writer and a checked resume (guards), what resume=never may delete
(owned), a job stopped by a signal (signals), parquet tables, checkpoints and their state as plain data (plain),
kept completions, metric tracking, the end-of-run summary, loading the task and policy a run starts from, and
standalone evaluation of its checkpoints."""
