"""grpo-lab: the GRPO training core (objective, rewards, tasks, policy, rollout, trainer, tables)."""

__version__ = "0.1.0"
