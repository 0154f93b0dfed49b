"""A training run's configuration: the schema (every key's type, default and reason: schema.py), the blocks its
registries complete with their members' own keys (blocks.py), the checks of its values before any model loads
(checks.py) and which option reads which key (reads.py)."""

from grpo_lab.config.schema import (
    DEVICE,
    DTYPES,
    LOGGER_BACKENDS,
    MAX_BUCKETS,
    MAX_EPS_HIGH,
    MAX_MU,
    MAX_NEW_TOKENS,
    MAX_REWARD_WORKERS,
    MAX_SAMPLES_PER_STEP,
    MAX_SEED,
    MAX_TEMPERATURE,
    MAX_THREADS,
    MAX_WAIT_S,
    MIN_TEMPERATURE,
    ROLLOUT_CORRECTIONS,
    STRATEGIES,
    AlgoConfig,
    CheckpointConfig,
    DistConfig,
    EvalConfig,
    EvalJobConfig,
    LoggerConfig,
    ModelConfig,
    RewardConfig,
    RolloutConfig,
    SamplerConfig,
    TaskConfig,
    TrainConfig,
    leaves,
)

__all__ = ["DEVICE", "DTYPES", "LOGGER_BACKENDS", "MAX_BUCKETS", "MAX_EPS_HIGH", "MAX_MU", "MAX_NEW_TOKENS",
           "MAX_REWARD_WORKERS", "MAX_SAMPLES_PER_STEP", "MAX_SEED", "MAX_TEMPERATURE", "MAX_THREADS", "MAX_WAIT_S",
           "MIN_TEMPERATURE", "ROLLOUT_CORRECTIONS", "STRATEGIES", "AlgoConfig", "CheckpointConfig", "DistConfig",
           "EvalConfig", "EvalJobConfig", "LoggerConfig", "ModelConfig", "RewardConfig", "RolloutConfig",
           "SamplerConfig", "TaskConfig", "TrainConfig", "leaves"]
