"""Reading a run or sweep: the tables (`load`) against their contract (`schema`), each job's config
(`config`) and records (`records`), the arms (`arms`), checkpoints aligned by samples drawn
(`checkpoints`), kept completions (`completions`), natural order of labels (`labels`)."""
