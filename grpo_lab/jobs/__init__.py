"""Jobs as a whole, above the stages they run: what a job starts from (`loading`: the task and the policy) and the
standalone evaluation of a run's checkpoints (`evaluate`); the training job's loop is grpo_lab/train/trainer.py."""
