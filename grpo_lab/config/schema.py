"""The one typed configuration of a training run. Hydra's ConfigStore registers these same
dataclasses (experiments/), so every key has one type, one default and one reason. The checks of a
config's values (`validate`, `advice`) are in grpo_lab/config/checks.py."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from grpo_lab.advantage import RULES
from grpo_lab.config.blocks import with_members
from grpo_lab.model.lora import LoraConfig
from grpo_lab.rollout.engines import ENGINES
from grpo_lab.samplers import SAMPLERS
from grpo_lab.tasks import TASKS

# Bounds on what one run may ask for at once: values past them cannot work (memory, integer ranges), whatever
# the machine. A step's draw is generated, scored and held together until its update: 65,536 samples are
# 8x DAPO's 512 prompts x 16 answers and 512x this package's default step; a larger batch is several steps.
MAX_SAMPLES_PER_STEP = 2**16
MAX_NEW_TOKENS = 2**15  # the longest completions published reasoning RL generates (32,768 tokens)
MAX_SEED = 2**32  # seeds are 32-bit, as numpy's; evaluation seeds torch with seed x 1,000,003 + step (64-bit)
MAX_THREADS = 1024  # torch CPU threads; no machine has more cores
MAX_REWARD_WORKERS = 256  # LaTeX-checking processes (each holds sympy, about 100 MB)
MAX_BUCKETS = 8  # model.length_buckets: each bucket past the first saves 1/8 of the positions, so 7 at most can
MAX_MU = 64  # updates per batch: each reuses the same old log-probs; the paper's mu is 1-4, and long before 64
# every ratio sits at its clip and the surrogate's gradient is zero
MAX_WAIT_S = 86_400  # a day: the longest timeout; selectors and timers overflow past about 24 days
# Sampling temperatures (rollouts; evaluation's when it samples, 0 being greedy): below MIN the logits are scaled
# 20x and more, so a group's G answers are nearly always one answer and every group ties (1e-30 tied every group);
# above MAX a gap of a few nats between the likeliest token and the rest shrinks under half a nat: sampling nears
# the uniform draw over the vocabulary, whatever the policy learned
MIN_TEMPERATURE = 0.05
MAX_TEMPERATURE = 10.0
MAX_EPS_HIGH = 10.0  # the ratio's upper clip 1 + eps_high: DAPO's clip-higher is 0.28; past 11 it never binds
# algo.zvp_alpha: RL-ZVP's paper tested 0.05-0.3 (0.1 its default). Its tied tokens' advantages are alpha x an
# entropy (nats, up to ln V); at 1 they already match a scored answer's (up to sqrt(G - 1)), past it ties outweigh
# every reward
DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")
DTYPES = ("auto", "float32", "bfloat16", "float16", "autocast_bf16")  # model.dtype (grpo_lab/model/load.py)


@dataclass
class ModelConfig:
    name: str = "tiny"  # "tiny": the built-in character model; "hf": a local transformers model
    path: str | None = None  # folder for name=hf (nothing is ever downloaded)
    device: str = "auto"  # "auto": cuda when present, else cpu
    # "auto": fp32 weights, bf16 autocast on cuda, exact fp32 on cpu | "autocast_bf16": fp32 weights, bf16
    # autocast on any device (CPU: only fast with AVX512-BF16/AMX) | "float32" | "bfloat16": weights stored in bf16.
    # Under autocast, LoRA's frozen base linears and output layer are stored in bf16 (lora.store_frozen: exact)
    dtype: str = "auto"
    # positions whose (chunk, V) fp32 logits exist at once in the policy and reference passes (0: all
    # (N, T, V) at once); at V = 151,936, 512 positions are 311 MB, and memory no longer grows with N x T
    logprob_chunk: int = 512
    # the policy and reference passes run a batch's completions in up to this many length buckets, each padded
    # only to its own longest row; a bucket is split off only where it saves 1/8 of the positions (model/buckets.py;
    # one pass's result within float rounding; SmolLM2's update 1.3x faster at 2: benchmarks/RESULTS.md); 1: one pass
    length_buckets: int = 2
    gradient_checkpointing: bool = False  # recompute each layer in the backward pass (prompt cache kept)
    gguf_file: str | None = None  # a GGUF file inside model.path to load (dequantized) instead of safetensors
    trust_remote_code: bool = False  # run the model folder's own Python (its auto_map): it runs as you, unchecked
    # training's one-pass sampler and an output layer that keeps its softmax for the backward: SmolLM2's rollout
    # and update faster; equal to the exact path within float rounding, not bitwise (tests/test_speed.py)
    fast_math: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)  # model.lora.rank > 0: train LoRA adapters (model/lora.py)


@dataclass
class TaskKeys:
    """The `task` block: `name` and the keys tasks share, then each task's own keys under its name
    (grpo_lab/tasks/<name>.py, its `settings_type`)."""

    name: str = "arithmetic"  # "arithmetic" (built in), "mathset" (local JSONL/parquet) or "gym" (reasoning-gym)
    levels: list[int] = field(default_factory=lambda: [1, 2, 3, 4])  # arithmetic levels to train on
    train_per_level: int = 32  # training pool size per level: prompts recur across epochs
    eval_per_level: int = 16  # held-out pool size per level
    seed: int = 1234  # the pools' seed: the same problems whatever the run's seed
    path: str | None = None  # mathset: training file
    eval_path: str | None = None  # mathset: held-out file (else a stable 20% hash split)
    difficulty: str = "level"  # level: the task's own label; pass_rate: a bin of the base model's pass rate
    difficulty_samples: int = 16  # pass_rate: samples per prompt to measure the base model
    answer_format: str = "bare"  # arithmetic: how the prompt asks for the answer and where it is read (ANSWER_FORMATS)
    chat_template: bool = False  # render prompts with the tokenizer's chat template (instruct models)
    system_prompt: str | None = None  # chat_template: a system message first (None: the template's default)
    # [user, assistant] worked examples before each question: earlier chat turns with chat_template, else plain text
    # (tasks/chat.py plain_prompt: a base model's few-shot prompt); problems asking a shot's question leave both pools
    shots: list[list[str]] = field(default_factory=list)


TaskConfig = with_members("TaskConfig", TaskKeys, TASKS, __name__)


@dataclass
class AlgoKeys:
    """The `algo` block: the objective's keys, then each advantage rule's own keys under its name
    (grpo_lab/advantage/<name>.py, its `settings_type`; rl_zvp's `zvp_alpha` predates the blocks and stays flat)."""

    lr: float = 1e-4  # on the tiny model 1e-4 learned, 5e-4 collapsed
    beta: float = 0.04  # KL weight (DeepSeekMath); 0 skips the reference model entirely
    eps_low: float = 0.2  # PPO clip below 1
    eps_high: float = 0.2  # PPO clip above 1 (DAPO raises it to 0.28)
    mu: int = 1  # updates per batch of samples (the paper's mu); old log-probs are reused
    # grpo: eq. 3 (a tied unit learns nothing) | ngrpo: a virtual right answer in every group's baseline (its
    # own Bessel std + 1e-6; algo.std is not used) | rl_zvp: eq. 3, and entropy-shaped token advantages in a
    # tied unit (each rule a module of grpo_lab/advantage/, its keys, checks and advice its own)
    advantage: str = "grpo"
    zvp_alpha: float = 0.1  # rl_zvp: the entropy's scale in a tied unit (the paper: 0.1; 0.05-0.3 tested)
    std: str = "population"  # population (eq. 3) | sample (TRL, verl) | none (Dr. GRPO)
    std_eps: float = 1e-8  # a group whose reward std is <= this is a tie
    loss_agg: str = "sequence"  # sequence (paper) | token (DAPO) | constant (Dr. GRPO)
    max_grad_norm: float = 1.0  # the gradient's global norm is clipped to this before each optimizer step
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (0: none, as DeepSeekMath)
    micro_batch_groups: int | None = None  # training units per backward pass (accumulated); None: the whole batch
    micro_batch_tokens: int | None = None  # and at most this many padded positions per micro-batch; None: no cap
    unit_weight: str = "prompt"  # prompt: a pooled unit weighs as one prompt (the paper); sample: as its samples
    mask_truncated: bool = False  # keep completions cut at max_new_tokens out of the loss (DAPO's overlong filter)
    # reweight each fresh sample's surrogate by pi_train / pi_rollout, capped (grpo_lab/train/rollout_correction.py):
    # none | token_truncate | token_mask | sequence_truncate | sequence_mask. The mismatch is measured in any mode
    rollout_correction: str = "none"
    rollout_correction_cap: float = 2.0  # the ratio's cap (TRL's vllm_importance_sampling_cap; > 1)
    # How a tied unit (every advantage 0: its rewards tied under a rule that gives a tie nothing, TRL's "zero-std
    # group") enters the loss (grpo_lab/advantage/ties.py). The first value of each is DeepSeekMath's objective.
    # Its tokens' beta x k3 KL term: keep (pulls toward the reference like any other token's) | mask (none)
    tied_kl: str = "keep"
    # The loss's denominator (algo.loss_agg's): count (tied units' weight, tokens or max_len in it, diluting every
    # other unit's gradient) | drop (left out, TRL PR #6365's dapo_zv; a batch with no untied unit keeps count's)
    tied_norm: str = "count"
    # A batch whose every advantage is 0 (all its units tied): step (TRL, verl: its mu optimizer steps still taken,
    # on the beta x k3 KL's gradient; at beta = 0 a zero one, AdamW's moments and weight decay still moving the
    # weights) | skip (no backward, no optimizer step, AdamW's state untouched) | zero (no backward; its mu optimizer
    # steps taken on a zero gradient: AdamW's moments decay and move the weights, its step count advances)
    tied_batch: str = "step"
    # every this many steps (0: never), measure the norm of the KL term's gradient from tied units and from untied
    # ones (the steps table's kl_grad_tied, kl_grad_untied): two more backward passes there, training unchanged
    kl_grad_every: int = 0


AlgoConfig = with_members("AlgoConfig", AlgoKeys, RULES, __name__)


@dataclass
class SamplerKeys:
    """The `sampler` block: `name` and `group_size`, then each sampler's own keys under its name
    (grpo_lab/samplers/<name>.py, its `settings_type`)."""

    name: str = field(default="fixed", metadata={"help": f"how many samples each prompt gets: {', '.join(SAMPLERS)}"})
    group_size: int = 8  # G: samples per group (the paper's fixed groups of eight)


SamplerConfig = with_members("SamplerConfig", SamplerKeys, SAMPLERS, __name__)


@dataclass
class RolloutKeys:
    """The `rollout` block: the keys every engine reads, then each engine's own keys under its name
    (grpo_lab/rollout/<name>_engine.py, its `settings_type`)."""

    engine: str = field(default="hf", metadata={"help": f"which engine draws every sample: {' | '.join(ENGINES)} "
                                                        "(grpo_lab/rollout/<name>_engine.py); samples, budgets and "
                                                        "tables are the same with any"})
    temperature: float = 1.0  # sampling temperature of training rollouts (0: greedy, every group tied)
    max_new_tokens: int = 6  # tokens a completion may have (arithmetic answers are <= 4 digits + the end token)
    max_rows_per_call: int | None = None  # rows (prompts x samples) per generation call, here and in eval; None: all
    stop: list[str] = field(default_factory=list)  # strings that end a completion (cut before them, as vLLM)


RolloutConfig = with_members("RolloutConfig", RolloutKeys, ENGINES, __name__)


@dataclass
class RewardConfig:
    accuracy: float = 1.0  # weight of the accuracy reward (1 = right, 0 = wrong)
    format: float = 0.0  # 0 keeps rewards binary, so ties are exactly all-correct / all-wrong
    workers: int = 2  # processes checking LaTeX answers (spawned once, reused every step; integers need none)
    answer_timeout_s: float = 2.0  # one LaTeX answer's check; past it the answer is wrong and counted
    step_budget_s: float = 10.0  # all LaTeX checks of one sampling round; past it the rest are wrong and counted


@dataclass
class EvalConfig:
    n: int = 16  # samples per held-out prompt: pass@k and cons@k are then known for every k <= n
    every: int = 0  # evaluate every this many steps (0: only the base model and the last step)
    temperature: float = 1.0  # sampling temperature of held-out samples
    # also evaluate each time samples drawn cross a multiple of this (0: off): arms that spend samples at
    # different rates are then evaluated at equal budgets, which is how the report aligns checkpoints
    every_samples: int = 0
    # and each time tokens generated cross a multiple of this (0: off): arms whose answers differ in length are
    # then evaluated at equal tokens too (the report's third alignment, beside equal samples and equal updates)
    every_tokens: int = 0
    # and each time optimizer steps taken cross a multiple of this (0: off): arms whose steps differ (algo.mu,
    # algo.tied_batch=skip, samplers that train nothing some steps) are then evaluated at equal updates too
    every_updates: int = 0


@dataclass
class CheckpointConfig:
    keep_last: int | None = None  # full checkpoints kept (older ones pruned); None: keep every one
    keep_steps: list[int] = field(default_factory=list)  # steps never pruned (kept whole)
    keep_eval: bool = True  # pruned eval-step checkpoints keep their weights, so experiments.evaluate can redo them
    final_weights_only: bool = False  # a finished run's last checkpoint drops its optimizer state (no resume past it)


LOGGER_BACKENDS = ("console", "tensorboard", "wandb")
STRATEGIES = ("ddp", "fsdp")  # dist.strategy (grpo_lab/train/parallel.py)
# algo.rollout_correction (grpo_lab/train/rollout_correction.py)
ROLLOUT_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass
class LoggerConfig:
    backends: list[str] = field(default_factory=lambda: ["console"])  # any of LOGGER_BACKENDS (conf/logger/)
    every_s: float = 10.0  # console: a line for the first step, then at most this often (seconds)
    every: int = 0  # console: also a line every this many steps (0: by time only)
    project: str = "grpo-lab"  # the W&B project runs are logged to
    name: str | None = None  # W&B run name; None: the job's overrides (experiments/ sets it), else the run id
    group: str | None = None  # W&B group; None: the sweep directory (experiments/ sets it)
    wandb_mode: str | None = None  # online | offline | disabled; None: wandb's own (WANDB_MODE, else online)


@dataclass
class DistConfig:
    backend: str = "auto"  # torch.distributed backend under torchrun: auto (nccl on CUDA, gloo on CPU) | gloo | nccl
    timeout_s: float = 600.0  # a collective waiting longer (a stuck rank) fails the run instead of hanging it
    # ddp: a full copy of the policy, reference and AdamW state on every rank, gradients summed | fsdp: FSDP2 shards
    # them over the ranks (models bigger than one GPU); the rollout gathers the weights once per step
    strategy: str = "ddp"


@dataclass
class TrainConfig:
    out_dir: str = "runs/default"  # the run directory (Hydra sets it to the job's folder)
    seed: int = 0  # the run's seed: sampling, the prompt stream's order and the sampler's own draws
    max_steps: int = 100  # optimizer steps at most (a sample or token budget may end the run first)
    max_samples: int | None = None  # stop once this many samples were drawn (equal-budget comparisons)
    max_tokens: int | None = None  # stop once this many tokens were generated
    prompts_per_step: int = 16  # B: prompts (groups) per optimizer step
    checkpoint_every: int = 50  # steps between checkpoints; the last step is always saved
    threads: int = 0  # torch CPU threads; 0 leaves torch's default
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # where metrics stream while the run goes
    log_completions: int = 0  # completions kept a step in completions/ (whole groups, in draw order); 0: none
    # end the run where the check after the base evaluation (or the first step) says it cannot train: the base model
    # solves no held-out problem, or every group of the first step tied (status done, run.json's `stopped` says why)
    stop_untrainable: bool = False
    # auto: continue the run in out_dir when its saved config matches (else refuse, naming the keys);
    # never: delete that run's tables, checkpoints and run.json, then start over
    resume: str = "auto"
    dist: DistConfig = field(default_factory=DistConfig)  # several processes (torchrun); ignored in one


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted key, value) of a config dataclass, nested blocks (the samplers' included) expanded."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaves(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


@dataclass
class EvalJobConfig:
    """Standalone evaluation of a run directory (checked by grpo_lab/jobs/evaluate.py before any model loads)."""

    run_dir: str = "???"  # the run to evaluate (its config.json gives model and task)
    n: int | None = None  # samples per held-out prompt, in [1, 65536]; null: the run's own eval.n
    temperature: float | None = None  # 0 (greedy) or in [0.05, 10]; null: the run's own eval.temperature
    steps: list[int] | None = None  # checkpoints to evaluate (0 = base model); None: base + all
    overwrite: bool = False  # replace an earlier evaluation's rows of the same settings (other settings' never)
