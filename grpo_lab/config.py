"""The one typed configuration of a training run. Hydra's ConfigStore registers these same
dataclasses (experiments/), so every key has one type, one default and one reason."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from grpo_lab.errors import ConfigError, require
from grpo_lab.model.files import check_model_files, check_model_folder, resolve_model_path
from grpo_lab.model.lora import LoraConfig, check_lora
from grpo_lab.rewards.rules import ANSWER_FORMATS
from grpo_lab.samplers import SamplerConfig, check_sampler, draw_bounds
from grpo_lab.tasks.arithmetic import check_arithmetic
from grpo_lab.tasks.mathset import check_math_file

# Bounds on what one run may ask for at once: values past them cannot work (memory, integer ranges), whatever
# the machine. A step's draw is generated, scored and held together until its update: 65,536 samples are
# 8x DAPO's 512 prompts x 16 answers and 512x this package's default step; a larger batch is several steps.
MAX_SAMPLES_PER_STEP = 2**16
MAX_NEW_TOKENS = 2**15  # the longest completions published reasoning RL generates (32,768 tokens)
MAX_SEED = 2**32  # seeds are 32-bit, as numpy's; evaluation seeds torch with seed x 1,000,003 + step (64-bit)
MAX_THREADS = 1024  # torch CPU threads; no machine has more cores
MAX_REWARD_WORKERS = 256  # LaTeX-checking processes (each holds sympy, about 100 MB)
MAX_MU = 64  # updates per batch: each reuses the same old log-probs; the paper's mu is 1-4, and long before 64
# every ratio sits at its clip and the surrogate's gradient is zero
MAX_WAIT_S = 86_400  # a day: the longest timeout; selectors and timers overflow past about 24 days
DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")
DTYPES = ("auto", "float32", "bfloat16", "float16", "autocast_bf16")  # model.dtype (grpo_lab/model/load.py)


@dataclass
class ModelConfig:
    name: str = "tiny"  # "tiny": the built-in character model; "hf": a local transformers model
    path: str | None = None  # folder for name=hf (nothing is ever downloaded)
    device: str = "auto"  # "auto": cuda when present, else cpu
    # "auto": fp32 weights, bf16 autocast on cuda, exact fp32 on cpu | "autocast_bf16": fp32 weights, bf16
    # autocast on any device (CPU: only fast with AVX512-BF16/AMX) | "float32" | "bfloat16": weights stored in bf16
    dtype: str = "auto"
    # positions whose (chunk, V) fp32 logits exist at once in the policy and reference passes (0: all
    # (N, T, V) at once); at V = 151,936, 512 positions are 311 MB, and memory no longer grows with N x T
    logprob_chunk: int = 512
    gradient_checkpointing: bool = False  # recompute each layer in the backward pass (prompt cache kept)
    gguf_file: str | None = None  # a GGUF file inside model.path to load (dequantized) instead of safetensors
    # training's one-pass sampler and an output layer that keeps its softmax for the backward: SmolLM2's rollout
    # and update faster; equal to the exact path within float rounding, not bitwise (tests/test_speed.py)
    fast_math: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)  # model.lora.rank > 0: train LoRA adapters (model/lora.py)


@dataclass
class TaskConfig:
    name: str = "arithmetic"  # "arithmetic" (built in) or "mathset" (local JSONL/parquet)
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
    # chat_template: earlier [user, assistant] turns before each question (a few-shot chat); problems asking a
    # shot's question leave both pools
    shots: list[list[str]] = field(default_factory=list)


ADVANTAGE_RULES = ("grpo", "ngrpo", "rl_zvp")  # algo.advantage (grpo_lab/train/advantages.py)


@dataclass
class AlgoConfig:
    lr: float = 1e-4  # on the tiny model 1e-4 learned, 5e-4 collapsed
    beta: float = 0.04  # KL weight (DeepSeekMath); 0 skips the reference model entirely
    eps_low: float = 0.2  # PPO clip below 1
    eps_high: float = 0.2  # PPO clip above 1 (DAPO raises it to 0.28)
    mu: int = 1  # updates per batch of samples (the paper's mu); old log-probs are reused
    # grpo: eq. 3 (a tied unit learns nothing) | ngrpo: a virtual right answer in every group's baseline (its
    # own Bessel std + 1e-6; algo.std is not used) | rl_zvp: eq. 3, and entropy-shaped token advantages in a
    # tied unit (grpo_lab/train/advantages.py)
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


@dataclass
class RolloutConfig:
    temperature: float = 1.0  # sampling temperature of training rollouts (0: greedy, every group tied)
    max_new_tokens: int = 6  # arithmetic answers are <= 4 digits + the end token
    max_rows_per_call: int | None = None  # rows (prompts x samples) per generation call, here and in eval; None: all
    stop: list[str] = field(default_factory=list)  # strings that end a completion (cut before them, as vLLM)


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


@dataclass
class CheckpointConfig:
    keep_last: int | None = None  # full checkpoints kept (older ones pruned); None: keep every one
    keep_steps: list[int] = field(default_factory=list)  # steps never pruned (kept whole)
    keep_eval: bool = True  # pruned eval-step checkpoints keep their weights, so experiments.evaluate can redo them
    final_weights_only: bool = False  # a finished run's last checkpoint drops its optimizer state (no resume past it)


LOGGER_BACKENDS = ("console", "tensorboard", "wandb")
STRATEGIES = ("ddp", "fsdp")  # dist.strategy (grpo_lab/train/parallel.py)


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


def check_finite(cfg: TrainConfig) -> None:
    """No float key may be NaN or infinite: every comparison with NaN is false, so it slips past range checks
    (algo.lr=inf trained to non-finite weights and ended `done`)."""
    for key, value in leaves(cfg):
        for v in value if isinstance(value, list) else [value]:
            require(not isinstance(v, float) or math.isfinite(v), key, value, "must be a finite number")


def check_step_size(cfg: TrainConfig) -> None:
    """One step's draw must fit what a step holds at once (MAX_SAMPLES_PER_STEP). The error names the count
    that grew it most against its default: prompts_per_step, sampler.group_size or a sampler's own count."""
    _, most = draw_per_step(cfg)
    if most <= MAX_SAMPLES_PER_STEP:
        return
    defaults = dict(leaves(TrainConfig()))
    counts = [(k, v) for k, v in leaves(cfg) if k in ("prompts_per_step", "sampler.group_size")
              or k.startswith(f"sampler.{cfg.sampler.name}.") and isinstance(v, int) and not isinstance(v, bool)]
    key, value = max(counts, key=lambda kv: kv[1] / max(1, defaults.get(kv[0]) or 1))
    require(False, key, value, f"one step could draw {most:,} samples (sampler={cfg.sampler.name}, prompts_per_step="
                               f"{cfg.prompts_per_step}, sampler.group_size={cfg.sampler.group_size}), over the "
                               f"{MAX_SAMPLES_PER_STEP:,} a step holds at once; take more steps of fewer samples")


def validate(cfg: TrainConfig) -> None:
    """One pass over every key, before any model loads. Raises ConfigError naming the first bad key."""
    check_finite(cfg)
    require(bool(cfg.out_dir), "out_dir", cfg.out_dir, "must name a folder")
    require(0 <= cfg.seed < MAX_SEED, "seed", cfg.seed, f"must be in [0, 2^32) ({MAX_SEED:,})")
    require(0 <= cfg.threads <= MAX_THREADS, "threads", cfg.threads, f"must be in [0, {MAX_THREADS}] (0: torch's default)")
    require(bool(DEVICE.fullmatch(cfg.model.device)), "model.device", cfg.model.device,
            "must be one of 'auto', 'cpu', 'cuda', 'cuda:N', 'mps'")
    require(cfg.model.name in ("tiny", "hf"), "model.name", cfg.model.name, "must be one of 'tiny', 'hf'")
    require(cfg.model.name != "hf" or bool(cfg.model.path), "model.path", cfg.model.path,
            "model=local needs model.path=DIR, a local model folder (or pkg:NAME; nothing is downloaded)")
    require(cfg.model.dtype in DTYPES, "model.dtype", cfg.model.dtype, f"must be one of {', '.join(map(repr, DTYPES))}")
    require(cfg.task.name in ("arithmetic", "mathset"), "task.name", cfg.task.name, "must be one of 'arithmetic', 'mathset'")
    require(cfg.task.name != "mathset" or bool(cfg.task.path), "task.path", cfg.task.path,
            "task=mathset needs task.path=FILE, a local JSONL or parquet file of problems")
    require(cfg.task.name != "mathset" or os.path.isfile(cfg.task.path), "task.path", cfg.task.path,
            "no such file (task=mathset needs an existing JSONL or parquet file)")
    require(cfg.task.eval_path is None or os.path.isfile(cfg.task.eval_path), "task.eval_path", cfg.task.eval_path,
             "must be an existing JSONL or parquet file")
    require(cfg.task.train_per_level >= 1, "task.train_per_level", cfg.task.train_per_level, "must be >= 1")
    require(cfg.task.eval_per_level >= 0, "task.eval_per_level", cfg.task.eval_per_level, "must be >= 0")
    if cfg.task.name == "arithmetic":  # levels that exist, each with enough distinct problems
        check_arithmetic(cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level)
    require(0 < cfg.algo.lr < 1, "algo.lr", cfg.algo.lr,
            "must be in (0, 1): an Adam step moves each weight by about lr, at 1 by more than a weight's size")
    require(cfg.algo.beta >= 0, "algo.beta", cfg.algo.beta, "must be >= 0")
    require(cfg.algo.eps_low > 0, "algo.eps_low", cfg.algo.eps_low, "must be > 0")
    require(cfg.algo.eps_high > 0, "algo.eps_high", cfg.algo.eps_high, "must be > 0")
    require(1 <= cfg.algo.mu <= MAX_MU, "algo.mu", cfg.algo.mu, f"must be in [1, {MAX_MU}]")
    require(cfg.algo.std in ("population", "sample", "none"), "algo.std", cfg.algo.std,
             "must be one of 'population', 'sample', 'none'")
    require(cfg.algo.advantage in ADVANTAGE_RULES, "algo.advantage", cfg.algo.advantage,
             f"must be one of {', '.join(map(repr, ADVANTAGE_RULES))}")
    require(cfg.algo.zvp_alpha > 0, "algo.zvp_alpha", cfg.algo.zvp_alpha, "must be > 0")
    require(cfg.algo.loss_agg in ("sequence", "token", "constant"), "algo.loss_agg", cfg.algo.loss_agg,
             "must be one of 'sequence', 'token', 'constant'")
    require(cfg.algo.max_grad_norm > 0, "algo.max_grad_norm", cfg.algo.max_grad_norm, "must be > 0")
    require(0 <= cfg.algo.weight_decay * cfg.algo.lr < 1, "algo.weight_decay", cfg.algo.weight_decay,
            "must be >= 0 with weight_decay x lr < 1 (AdamW scales each weight by 1 - lr x weight_decay a step)")
    top = (cfg.reward.accuracy + cfg.reward.format) / 2  # the largest population std of rewards in [0, a + f]
    require(top <= 0 or 0 <= cfg.algo.std_eps < top, "algo.std_eps", cfg.algo.std_eps,
            f"must be in [0, {top:g}): below 0 a tie's zero std is divided by; at (reward.accuracy + reward.format) / 2 "
            "every group is a tie")
    require(cfg.task.difficulty in ("level", "pass_rate"), "task.difficulty", cfg.task.difficulty,
             "must be one of 'level', 'pass_rate'")
    require(2 <= cfg.task.difficulty_samples <= MAX_SAMPLES_PER_STEP, "task.difficulty_samples",
            cfg.task.difficulty_samples, f"must be in [2, {MAX_SAMPLES_PER_STEP:,}] (samples per prompt)")
    check_sampler(cfg.sampler)
    require(cfg.rollout.temperature > 0, "rollout.temperature", cfg.rollout.temperature,
            "must be > 0: greedy decoding draws G identical answers, so every group ties and nothing trains")
    require(1 <= cfg.rollout.max_new_tokens <= MAX_NEW_TOKENS, "rollout.max_new_tokens", cfg.rollout.max_new_tokens,
            f"must be in [1, {MAX_NEW_TOKENS:,}]")
    require(0 <= cfg.eval.n <= MAX_SAMPLES_PER_STEP, "eval.n", cfg.eval.n,
            f"must be in [0, {MAX_SAMPLES_PER_STEP:,}] (samples per held-out prompt; 0 turns evaluation off)")
    require(cfg.eval.every >= 0, "eval.every", cfg.eval.every, "must be >= 0")
    require(cfg.eval.temperature >= 0, "eval.temperature", cfg.eval.temperature, "must be >= 0")
    require(cfg.max_steps >= 1, "max_steps", cfg.max_steps, "must be >= 1")
    require(cfg.prompts_per_step >= 1, "prompts_per_step", cfg.prompts_per_step, "must be >= 1")
    require(cfg.checkpoint_every >= 1, "checkpoint_every", cfg.checkpoint_every, "must be >= 1")
    check_step_size(cfg)
    per_step, most = draw_per_step(cfg)  # samples of one step, at least and at most
    if cfg.max_samples is not None:
        require(cfg.max_samples >= per_step, "max_samples", cfg.max_samples,
                 f"below one step's draw ({per_step} samples for sampler.name={cfg.sampler.name})")
        require(cfg.max_samples <= cfg.max_steps * most, "max_samples", cfg.max_samples,
                 f"not reachable in max_steps={cfg.max_steps} steps of at most {most} samples; raise max_steps")
    if cfg.max_tokens is not None:
        require(cfg.max_tokens >= 1, "max_tokens", cfg.max_tokens, "must be >= 1")
        require(cfg.max_tokens <= cfg.max_steps * most * cfg.rollout.max_new_tokens, "max_tokens", cfg.max_tokens,
                 f"not reachable in max_steps={cfg.max_steps} steps; raise max_steps")
    # evaluation at equal samples drawn
    require(cfg.eval.every_samples >= 0, "eval.every_samples", cfg.eval.every_samples, "must be >= 0 (0: off)")
    # memory at real shapes, precision, checkpoints (issue 8)
    require(cfg.model.dtype != "float16", "model.dtype", cfg.model.dtype,
             "float16 needs loss scaling, which grpo-lab does not do; use 'bfloat16' or 'auto'")
    check_lora(cfg.model.lora, cfg.dist.strategy)
    require(cfg.model.logprob_chunk >= 0, "model.logprob_chunk", cfg.model.logprob_chunk, "must be >= 0 (0: full logits)")
    a = cfg.algo
    require(a.micro_batch_groups is None or a.micro_batch_groups >= 1, "algo.micro_batch_groups",
             a.micro_batch_groups, "must be >= 1 or null (the whole batch)")
    require(a.micro_batch_tokens is None or a.micro_batch_tokens >= 1, "algo.micro_batch_tokens",
             a.micro_batch_tokens, "must be >= 1 or null (no cap)")
    require(a.unit_weight in ("prompt", "sample"), "algo.unit_weight", a.unit_weight, "must be one of 'prompt', 'sample'")
    require(cfg.rollout.max_rows_per_call is None or cfg.rollout.max_rows_per_call >= 1, "rollout.max_rows_per_call",
             cfg.rollout.max_rows_per_call, "must be >= 1 or null (every row in one call)")
    c = cfg.checkpoint
    require(c.keep_last is None or c.keep_last >= 1, "checkpoint.keep_last", c.keep_last,
             "must be >= 1 (the latest checkpoint is needed to resume) or null (keep all)")
    require(all(k >= 1 for k in c.keep_steps), "checkpoint.keep_steps", c.keep_steps, "steps count from 1")
    # watching runs: logger backends and kept completions
    for name in cfg.logger.backends:
        require(name in LOGGER_BACKENDS, "logger.backends", name, f"must be among {', '.join(map(repr, LOGGER_BACKENDS))}")
    require(cfg.logger.every_s >= 0, "logger.every_s", cfg.logger.every_s, "must be >= 0")
    require(cfg.logger.every >= 0, "logger.every", cfg.logger.every, "must be >= 0 (0: by time only)")
    require(bool(cfg.logger.project) or "wandb" not in cfg.logger.backends, "logger.project", cfg.logger.project,
            "must name a W&B project")
    require(cfg.logger.wandb_mode in (None, "online", "offline", "disabled"), "logger.wandb_mode",
             cfg.logger.wandb_mode, "must be one of null, 'online', 'offline', 'disabled'")
    require(cfg.log_completions >= 0, "log_completions", cfg.log_completions, "must be >= 0 (0: none)")
    # reliability: resume, answer checking, input files (read here, before any model loads)
    require(cfg.resume in ("auto", "never"), "resume", cfg.resume, "must be one of 'auto', 'never'")
    require(1 <= cfg.reward.workers <= MAX_REWARD_WORKERS, "reward.workers", cfg.reward.workers,
            f"must be in [1, {MAX_REWARD_WORKERS}]")
    require(cfg.reward.accuracy >= 0, "reward.accuracy", cfg.reward.accuracy, "must be >= 0")
    require(cfg.reward.format >= 0, "reward.format", cfg.reward.format, "must be >= 0")
    require(cfg.reward.accuracy + cfg.reward.format > 0, "reward.accuracy", cfg.reward.accuracy,
            "with reward.format=0 every reward is 0: every group ties and nothing trains")
    for key in ("reward.answer_timeout_s", "reward.step_budget_s", "dist.timeout_s"):
        block, name = key.split(".")
        value = getattr(getattr(cfg, block), name)
        require(0 < value <= MAX_WAIT_S, key, value, f"must be in (0, {MAX_WAIT_S:,}] seconds")
    # data parallel (torchrun)
    require(cfg.dist.backend in ("auto", "gloo", "nccl"), "dist.backend", cfg.dist.backend,
             "must be one of 'auto', 'gloo', 'nccl'")
    require(cfg.dist.strategy in STRATEGIES, "dist.strategy", cfg.dist.strategy, f"must be one of {', '.join(map(repr, STRATEGIES))}")
    if cfg.task.name == "mathset":  # read once per (path, size, mtime)
        for key in ("task.path", "task.eval_path"):
            path = cfg.task.path if key == "task.path" else cfg.task.eval_path
            if path:
                check_math_file(path, key)
    # real models: local files, chat prompts, answer formats, stop strings, truncation
    if cfg.model.name == "hf":
        try:
            check_model_files(cfg.model.path, cfg.model.gguf_file)
        except FileNotFoundError as e:
            raise ConfigError(str(e)) from None
        if cfg.model.gguf_file is None:  # a GGUF file holds config, weights and tokenizer in one
            folder = resolve_model_path(cfg.model.path)
            require(model_files_present(str(folder)), "model.path", cfg.model.path,
                     "the folder has no model/tokenizer (needs config.json, weights and tokenizer files)")
            check_model_folder(folder)  # config.json readable, every weight file whole
    require(cfg.model.gguf_file is None or cfg.model.name == "hf", "model.gguf_file", cfg.model.gguf_file,
             "needs model.name=hf (model=local)")
    require(cfg.task.answer_format in ANSWER_FORMATS, "task.answer_format", cfg.task.answer_format,
             f"must be one of {', '.join(map(repr, ANSWER_FORMATS))}")
    require(cfg.task.answer_format == "bare" or cfg.task.name == "arithmetic", "task.answer_format",
             cfg.task.answer_format, "applies to task=arithmetic (mathset answers are always \\boxed{})")
    require(cfg.task.system_prompt is None or cfg.task.chat_template, "task.system_prompt", cfg.task.system_prompt,
             "needs task.chat_template=true")
    require(not cfg.task.shots or cfg.task.chat_template, "task.shots", cfg.task.shots, "needs task.chat_template=true")
    require(all(len(s) == 2 and all(isinstance(t, str) and t for t in s) for s in cfg.task.shots), "task.shots",
            cfg.task.shots, "must be [user, assistant] pairs of non-empty strings")
    require(cfg.task.chat_template is False or cfg.model.name == "hf", "task.chat_template", cfg.task.chat_template,
             "needs an instruct model (model=local or model=smollm2); the built-in model has no chat template")
    require(all(isinstance(s, str) and s for s in cfg.rollout.stop), "rollout.stop", cfg.rollout.stop,
             "must be a list of non-empty strings")


def advice(cfg: TrainConfig) -> list[str]:
    """One line for each setting that is valid but cannot learn, or wastes the run: every group would tie,
    or every answer be cut or misread. Printed as warnings before any job starts; never an error."""
    out = []
    if cfg.task.name == "mathset" and cfg.model.name == "tiny":
        out.append("task=mathset with the built-in model (model=tiny): it knows only the arithmetic task's a+b= "
                   "prompts, so every answer will be wrong and every group tie; use model=local model.path=DIR")
    if cfg.task.chat_template and cfg.rollout.max_new_tokens < 16:
        out.append(f"rollout.max_new_tokens={cfg.rollout.max_new_tokens} with a chat model: replies are sentences "
                   "and will be cut before their answer (truncated, rewarded 0); give them 32 or more")
    if cfg.model.name == "hf" and cfg.task.name == "arithmetic" and cfg.task.answer_format == "bare":
        out.append("task.answer_format=bare with a model=local model: the whole reply must be the number, which "
                   "instruct models rarely write; use task.answer_format=boxed (or another format that reads the "
                   "answer out of a sentence) with task.chat_template=true")
    if cfg.model.name == "hf" and cfg.algo.lr >= 1e-5 and not cfg.model.lora.rank:  # LoRA adapters: ~1e-4
        out.append(f"algo.lr={cfg.algo.lr:g} with a model=local model: that is the built-in model's rate; pretrained "
                   "LLMs are trained near 1e-6 (TRL's default) and collapse at 1e-4 (LoRA adapters: model.lora.rank)")
    if cfg.algo.advantage == "ngrpo" and cfg.algo.std != "population":
        out.append(f"algo.std={cfg.algo.std} is not used by algo.advantage=ngrpo: its advantages divide by its own "
                   "std (Bessel's, over the group and its virtual right answer, + 1e-6)")
    if cfg.sampler.name == "dars" and cfg.algo.unit_weight == "prompt":
        out.append("sampler=dars with algo.unit_weight=prompt: a prompt's extra answers share one group's weight, so "
                   "hard prompts gain none (DARS's point); algo.unit_weight=sample weighs every answer alike, as its "
                   "code")
    if cfg.sampler.name == "pods" and cfg.sampler.pods.n == cfg.sampler.group_size:
        out.append(f"sampler.pods.n={cfg.sampler.pods.n} equals sampler.group_size: every answer drawn trains, "
                   "which is sampler=fixed; PODS draws more than it trains")
    if cfg.eval.n > 1 and cfg.eval.temperature == 0:
        out.append(f"eval.temperature=0 with eval.n={cfg.eval.n}: the n greedy samples are identical, so pass@k and "
                   "cons@k equal pass@1 at every k")
    return out


def model_files_present(path: str) -> bool:
    """Whether a local folder holds a transformers model: its config, weights and a tokenizer."""
    names = set(os.listdir(path))
    weights = any(n.endswith((".safetensors", ".bin", ".pt", ".gguf")) or n.endswith(".index.json") for n in names)
    tokenizer = bool(names & {"tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json"})
    return "config.json" in names and weights and tokenizer


def draw_per_step(cfg: TrainConfig) -> tuple[int, int]:
    """The fewest and the most samples one step of `cfg`'s sampler can draw (for the budget checks)."""
    return draw_bounds(cfg.sampler, cfg.prompts_per_step)


@dataclass
class EvalJobConfig:
    """Standalone evaluation of a finished (or running) run directory."""

    run_dir: str = "???"  # the run to evaluate (its config.json gives model and task)
    n: int = 32  # samples per held-out prompt
    temperature: float = 1.0
    steps: list[int] | None = None  # checkpoints to evaluate (0 = base model); None: base + all
