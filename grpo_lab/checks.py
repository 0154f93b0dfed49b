"""The checks of a training config's values, before any model loads: `validate` refuses a value that cannot
work in one line naming the key; `advice` warns of one that is valid but cannot learn. The keys, their
defaults and the bounds are in grpo_lab/config.py."""

from __future__ import annotations

import math
import os

from grpo_lab.advantage import check_rules, rule
from grpo_lab.advantage.ties import check_ties
from grpo_lab.config import (
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
    STRATEGIES,
    TrainConfig,
    leaves,
)
from grpo_lab.config import ROLLOUT_CORRECTIONS as CORRECTIONS
from grpo_lab.errors import ConfigError, require
from grpo_lab.footprint import available, check_fits, eval_rows_per_call, model_shape, on_host, sampling_bytes
from grpo_lab.model.files import check_model_files, check_model_folder, resolve_model_path
from grpo_lab.model.lora import check_lora
from grpo_lab.rewards.rules import ANSWER_FORMATS
from grpo_lab.rollout.engines import check_engine
from grpo_lab.samplers import SAMPLERS, check_sampler, draw_bounds
from grpo_lab.tasks import task_kind


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
    require(0 <= cfg.threads <= MAX_THREADS, "threads", cfg.threads,
            f"must be in [0, {MAX_THREADS}] (0: torch's default)")
    require(bool(DEVICE.fullmatch(cfg.model.device)), "model.device", cfg.model.device,
            "must be one of 'auto', 'cpu', 'cuda', 'cuda:N', 'mps'")
    require(cfg.model.name in ("tiny", "hf"), "model.name", cfg.model.name, "must be one of 'tiny', 'hf'")
    require(cfg.model.name != "hf" or bool(cfg.model.path), "model.path", cfg.model.path,
            "model=local needs model.path=DIR, a local model folder (or pkg:NAME; nothing is downloaded)")
    require(cfg.model.dtype in DTYPES, "model.dtype", cfg.model.dtype, f"must be one of {', '.join(map(repr, DTYPES))}")
    task = task_kind(cfg.task.name)  # the task named, its own checks below (grpo_lab/tasks/)
    require(cfg.task.eval_path is None or os.path.isfile(cfg.task.eval_path), "task.eval_path", cfg.task.eval_path,
             "must be an existing JSONL or parquet file")
    require(cfg.task.train_per_level >= 1, "task.train_per_level", cfg.task.train_per_level, "must be >= 1")
    require(cfg.task.eval_per_level >= 0, "task.eval_per_level", cfg.task.eval_per_level, "must be >= 0")
    require(cfg.task.answer_format in ANSWER_FORMATS, "task.answer_format", cfg.task.answer_format,
             f"must be one of {', '.join(map(repr, ANSWER_FORMATS))}")
    task.check(cfg)
    require(0 < cfg.algo.lr < 1, "algo.lr", cfg.algo.lr,
            "must be in (0, 1): an Adam step moves each weight by about lr, at 1 by more than a weight's size")
    require(cfg.algo.beta >= 0, "algo.beta", cfg.algo.beta, "must be >= 0")
    require(0 < cfg.algo.eps_low < 1, "algo.eps_low", cfg.algo.eps_low,
            "must be in (0, 1): the ratio is clipped below at 1 - eps_low, which must stay a positive ratio")
    require(0 < cfg.algo.eps_high <= MAX_EPS_HIGH, "algo.eps_high", cfg.algo.eps_high,
            f"must be in (0, {MAX_EPS_HIGH:g}]: the ratio is clipped above at 1 + eps_high (DAPO: 0.28); past "
            f"{1 + MAX_EPS_HIGH:g} the clip never binds")
    require(1 <= cfg.algo.mu <= MAX_MU, "algo.mu", cfg.algo.mu, f"must be in [1, {MAX_MU}]")
    require(cfg.algo.std in ("population", "sample", "none"), "algo.std", cfg.algo.std,
             "must be one of 'population', 'sample', 'none'")
    check_rules(cfg.algo)  # the advantage rule named, and every rule's own keys (grpo_lab/advantage/)
    require(cfg.algo.loss_agg in ("sequence", "token", "constant"), "algo.loss_agg", cfg.algo.loss_agg,
             "must be one of 'sequence', 'token', 'constant'")
    require(cfg.algo.max_grad_norm > 0, "algo.max_grad_norm", cfg.algo.max_grad_norm, "must be > 0")
    require(0 <= cfg.algo.weight_decay * cfg.algo.lr < 1, "algo.weight_decay", cfg.algo.weight_decay,
            "must be >= 0 with weight_decay x lr < 1 (AdamW scales each weight by 1 - lr x weight_decay a step)")
    top = (cfg.reward.accuracy + cfg.reward.format) / 2  # the largest population std of rewards in [0, a + f]
    require(top <= 0 or 0 <= cfg.algo.std_eps < top, "algo.std_eps", cfg.algo.std_eps,
            f"must be in [0, {top:g}): below 0 a tie's zero std is divided by; "
            "at (reward.accuracy + reward.format) / 2 every group is a tie")
    require(cfg.task.difficulty in ("level", "pass_rate"), "task.difficulty", cfg.task.difficulty,
             "must be one of 'level', 'pass_rate'")
    require(2 <= cfg.task.difficulty_samples <= MAX_SAMPLES_PER_STEP, "task.difficulty_samples",
            cfg.task.difficulty_samples, f"must be in [2, {MAX_SAMPLES_PER_STEP:,}] (samples per prompt)")
    check_sampler(cfg.sampler)
    require(not rule(cfg.algo.advantage).predicted or SAMPLERS[cfg.sampler.name].predicts, "algo.advantage",
            cfg.algo.advantage, f"takes each prompt's baseline from a sampler that predicts its pass rate "
            f"({', '.join(n for n, c in SAMPLERS.items() if c.predicts)}), not sampler.name={cfg.sampler.name}")
    require(MIN_TEMPERATURE <= cfg.rollout.temperature <= MAX_TEMPERATURE, "rollout.temperature",
            cfg.rollout.temperature, f"must be in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]: colder, a group's G "
            "answers are nearly always one answer, so every group ties and nothing trains; hotter, sampling nears a "
            "uniform draw over the vocabulary")
    require(1 <= cfg.rollout.max_new_tokens <= MAX_NEW_TOKENS, "rollout.max_new_tokens", cfg.rollout.max_new_tokens,
            f"must be in [1, {MAX_NEW_TOKENS:,}]")
    require(0 <= cfg.eval.n <= MAX_SAMPLES_PER_STEP, "eval.n", cfg.eval.n,
            f"must be in [0, {MAX_SAMPLES_PER_STEP:,}] (samples per held-out prompt; 0 turns evaluation off)")
    require(cfg.eval.every >= 0, "eval.every", cfg.eval.every, "must be >= 0")
    require(cfg.eval.temperature == 0 or MIN_TEMPERATURE <= cfg.eval.temperature <= MAX_TEMPERATURE,
            "eval.temperature", cfg.eval.temperature, f"must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, "
            f"{MAX_TEMPERATURE:g}]: colder is greedy but for float noise, hotter a near-uniform draw")
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
    require(cfg.eval.every_tokens >= 0, "eval.every_tokens", cfg.eval.every_tokens, "must be >= 0 (0: off)")
    require(cfg.eval.every_updates >= 0, "eval.every_updates", cfg.eval.every_updates, "must be >= 0 (0: off)")
    # memory at real shapes, precision, checkpoints
    require(cfg.model.dtype != "float16", "model.dtype", cfg.model.dtype,
             "float16 needs loss scaling, which grpo-lab does not do; use 'bfloat16' or 'auto'")
    check_lora(cfg.model.lora, cfg.dist.strategy)
    check_engine(cfg)
    require(cfg.model.logprob_chunk >= 0, "model.logprob_chunk", cfg.model.logprob_chunk,
            "must be >= 0 (0: full logits)")
    require(1 <= cfg.model.length_buckets <= MAX_BUCKETS, "model.length_buckets", cfg.model.length_buckets,
            f"must be 1-{MAX_BUCKETS} (1: one pass; each further bucket must save 1/8 of the positions, so "
            f"no more than {MAX_BUCKETS} can)")
    a = cfg.algo
    require(a.micro_batch_groups is None or a.micro_batch_groups >= 1, "algo.micro_batch_groups",
             a.micro_batch_groups, "must be >= 1 or null (the whole batch)")
    require(a.micro_batch_tokens is None or a.micro_batch_tokens >= 1, "algo.micro_batch_tokens",
             a.micro_batch_tokens, "must be >= 1 or null (no cap)")
    require(a.unit_weight in ("prompt", "sample"), "algo.unit_weight", a.unit_weight,
            "must be one of 'prompt', 'sample'")
    require(a.rollout_correction in CORRECTIONS, "algo.rollout_correction", a.rollout_correction,
            f"must be one of {', '.join(map(repr, CORRECTIONS))}")
    check_ties(a, cfg.dist.strategy)
    require(a.rollout_correction_cap > 1, "algo.rollout_correction_cap", a.rollout_correction_cap,
            "must be > 1: a ratio pi_train / pi_rollout of 1 (no mismatch) must pass the cap unchanged")
    require(cfg.rollout.max_rows_per_call is None or cfg.rollout.max_rows_per_call >= 1, "rollout.max_rows_per_call",
             cfg.rollout.max_rows_per_call, "must be >= 1 or null (every row in one call)")
    c = cfg.checkpoint
    require(c.keep_last is None or c.keep_last >= 1, "checkpoint.keep_last", c.keep_last,
             "must be >= 1 (the latest checkpoint is needed to resume) or null (keep all)")
    require(all(k >= 1 for k in c.keep_steps), "checkpoint.keep_steps", c.keep_steps, "steps count from 1")
    # watching runs: logger backends and kept completions
    for name in cfg.logger.backends:
        require(name in LOGGER_BACKENDS, "logger.backends", name,
                f"must be among {', '.join(map(repr, LOGGER_BACKENDS))}")
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
    require(cfg.dist.strategy in STRATEGIES, "dist.strategy", cfg.dist.strategy,
            f"must be one of {', '.join(map(repr, STRATEGIES))}")
    train, held_out = task_sizes(cfg)  # mathset: its files read once per (path, size, mtime)
    split = "task.eval_path" if cfg.task.eval_path else "task.path"
    require(train >= 1, split, getattr(cfg.task, split.split(".")[1]),
            "leaves no training problem (every one is held out: the held-out file holds its text, or the hash "
            "split of a small file took all)")
    require(held_out >= 1 or not cfg.eval.n, "eval.n", cfg.eval.n,
            f"evaluation is on, but task={cfg.task.name} has no held-out problem ({task.no_held_out(cfg)}): nothing "
            "to evaluate; set eval.n=0 (eval=none) or give it held-out problems")
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
            check_model_folder(folder, cfg.model.trust_remote_code)  # readable, no untrusted code, weights whole
    require(cfg.model.gguf_file is None or cfg.model.name == "hf", "model.gguf_file", cfg.model.gguf_file,
             "needs model.name=hf (model=local)")
    require(cfg.task.system_prompt is None or cfg.task.chat_template, "task.system_prompt", cfg.task.system_prompt,
             "needs task.chat_template=true")
    require(not cfg.task.shots or cfg.task.chat_template, "task.shots", cfg.task.shots, "needs task.chat_template=true")
    require(all(len(s) == 2 and all(isinstance(t, str) and t for t in s) for s in cfg.task.shots), "task.shots",
            cfg.task.shots, "must be [user, assistant] pairs of non-empty strings")
    require(cfg.task.chat_template is False or cfg.model.name == "hf", "task.chat_template", cfg.task.chat_template,
             "needs an instruct model (model=local or model=smollm2); the built-in model has no chat template")
    require(all(isinstance(s, str) and s for s in cfg.rollout.stop), "rollout.stop", cfg.rollout.stop,
             "must be a list of non-empty strings")
    check_memory(cfg, train, held_out)


def task_sizes(cfg: TrainConfig) -> tuple[int, int]:
    """(training problems, held-out problems) of the configured task, before it is built (mathset: its files
    read and checked, cached)."""
    return task_kind(cfg.task.name).sizes(cfg)


def check_memory(cfg: TrainConfig, train: int, held_out: int, free: int | None = None, eval_n: int | None = None,
                 eval_key: str = "eval.n") -> None:
    """Every count that multiplies samples by tokens, against the memory free now (grpo_lab/footprint.py): a
    step's draw, the evaluation, the pass-rate labelling. `free`: bytes (None: MemAvailable). experiments.evaluate
    passes its own n as `eval_n`, named `eval_key` in the refusal."""
    free = available() if free is None else free
    if free is None:
        return
    m, tokens = cfg.model, cfg.rollout.max_new_tokens
    shape = model_shape(m.name, resolve_model_path(m.path, m.gguf_file) if m.name == "hf" else None, m.gguf_file,
                        m.dtype)
    host, cap = on_host(m.device), cfg.rollout.max_rows_per_call

    def held(rows: int, call: int, kept: int = 0) -> int:  # at least, at the peak: one call of `call` rows
        return sampling_bytes(rows, call if cap is None else min(cap, call), tokens, shape, host, kept)

    fewest, _ = draw_per_step(cfg)
    check_fits("rollout.max_new_tokens", tokens, f"a step's draw ({fewest:,} samples of up to {tokens:,} tokens)",
               held(fewest, fewest), free, "draw fewer samples a step, or cap rollout.max_rows_per_call")
    eval_n = cfg.eval.n if eval_n is None else eval_n
    for key, n, prompts, what in ((eval_key, eval_n, held_out, "an evaluation"),
                                  ("task.difficulty_samples", cfg.task.difficulty_samples * (
                                      cfg.task.difficulty == "pass_rate"), train + held_out, "measuring pass rates")):
        if n:
            kind = "held-out prompts" if key == eval_key else "prompts"
            check_fits(key, n, f"{what} of {key}={n:,} x {prompts:,} {kind} ({n * prompts:,} samples of up to "
                       f"{tokens:,} tokens)", held(n * prompts, eval_rows_per_call(prompts, n), n * prompts),
                       free, f"lower {key}, or cap the rows sampled at once with rollout.max_rows_per_call")


def advice(cfg: TrainConfig) -> list[str]:
    """One line for each setting that is valid but cannot learn, or wastes the run: every group would tie,
    or every answer be cut or misread. Printed as warnings before any job starts; never an error."""
    out = []
    out += task_kind(cfg.task.name).advice(cfg)
    if cfg.task.chat_template and cfg.rollout.max_new_tokens < 16:
        out.append(f"rollout.max_new_tokens={cfg.rollout.max_new_tokens} with a chat model: replies are sentences "
                   "and will be cut before their answer (truncated, rewarded 0); give them 32 or more")
    if cfg.model.name == "hf" and cfg.algo.lr >= 1e-5 and not cfg.model.lora.rank:  # LoRA adapters: ~1e-4
        out.append(f"algo.lr={cfg.algo.lr:g} with a model=local model: that is the built-in model's rate; pretrained "
                   "LLMs are trained near 1e-6 (TRL's default) and collapse at 1e-4 (LoRA adapters: model.lora.rank)")
    out += rule(cfg.algo.advantage).advice(cfg)
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
