"""The checks of a training config's values, before any model loads: `validate` refuses a value that cannot
work in one line naming the key; `advice` warns of one that is valid but cannot learn. Here the keys every
run reads, a short function a block; a key only one sampler, rule, task or engine reads is checked by that member
(its `check`, its `advice`). The keys, their defaults and the bounds are in grpo_lab/config/schema.py."""

from __future__ import annotations

import math
import os

from grpo_lab.advantage import RULES, check_rules, rule
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
    """One pass over every key, before any model loads, block by block; a key only one sampler, rule, task or
    engine reads is checked by that member (its `check`). Raises ConfigError naming the first bad key."""
    check_finite(cfg)
    check_run(cfg)
    check_model(cfg)
    check_task(cfg)
    check_algo(cfg)
    check_sampler(cfg.sampler)
    check_sampler_and_rule(cfg)
    check_rollout(cfg)
    check_eval(cfg)
    check_budgets(cfg)
    check_checkpoint(cfg)
    check_logger(cfg)
    check_reward(cfg)
    check_dist(cfg)
    train, held_out = task_sizes(cfg)  # mathset: its files read once per (path, size, mtime)
    require(held_out >= 1 or not cfg.eval.n, "eval.n", cfg.eval.n,
            f"evaluation is on, but task={cfg.task.name} has no held-out problem "
            f"({task_kind(cfg.task.name).no_held_out(cfg)}): nothing to evaluate; set eval.n=0 (eval=none) or give it "
            "held-out problems")
    check_local_model(cfg)
    check_memory(cfg, train, held_out)


def check_sampler_and_rule(cfg: TrainConfig) -> None:
    """What the chosen sampler and advantage rule need of each other and of the rewards."""
    kind, how = SAMPLERS[cfg.sampler.name], rule(cfg.algo.advantage)
    require(not how.predicted or kind.predicts, "algo.advantage", cfg.algo.advantage,
            f"takes each prompt's baseline from a sampler that predicts its pass rate "
            f"({', '.join(n for n, c in SAMPLERS.items() if c.predicts)}), not sampler.name={cfg.sampler.name}")
    require(not kind.one_answer or how.predicted, "algo.advantage", cfg.algo.advantage,
            f"sampler={kind.name} draws one answer a prompt, whose group-relative advantage is always 0: nothing would "
            f"train; use a rule whose baseline is the sampler's prediction "
            f"({', '.join(n for n, c in RULES.items() if c.predicted)})")
    top, ceiling = cfg.reward.accuracy + cfg.reward.format, kind.reward_ceiling
    if ceiling is not None:
        require(top <= ceiling, "reward.format", cfg.reward.format,
                f"sampler={kind.name} counts rewards as successes, which must lie in [0, {ceiling:g}]: "
                f"reward.accuracy + reward.format = {top:g} would push its tracked pass rates out of range")


def check_run(cfg: TrainConfig) -> None:
    """The run's own keys: where it writes, its seed and threads, whether it resumes, the completions it keeps."""
    require(bool(cfg.out_dir), "out_dir", cfg.out_dir, "must name a folder")
    require(0 <= cfg.seed < MAX_SEED, "seed", cfg.seed, f"must be in [0, 2^32) ({MAX_SEED:,})")
    require(0 <= cfg.threads <= MAX_THREADS, "threads", cfg.threads,
            f"must be in [0, {MAX_THREADS}] (0: torch's default)")
    require(cfg.resume in ("auto", "never"), "resume", cfg.resume, "must be one of 'auto', 'never'")
    require(cfg.log_completions >= 0, "log_completions", cfg.log_completions, "must be >= 0 (0: none)")


def check_model(cfg: TrainConfig) -> None:
    """The `model` block's keys, without reading its files (check_local_model): device, kind, precision, LoRA and
    the passes' shapes."""
    m = cfg.model
    require(bool(DEVICE.fullmatch(m.device)), "model.device", m.device,
            "must be one of 'auto', 'cpu', 'cuda', 'cuda:N', 'mps'")
    require(m.name in ("tiny", "hf"), "model.name", m.name, "must be one of 'tiny', 'hf'")
    require(m.name != "hf" or bool(m.path), "model.path", m.path,
            "model=local needs model.path=DIR, a local model folder (or pkg:NAME; nothing is downloaded)")
    require(m.dtype in DTYPES, "model.dtype", m.dtype, f"must be one of {', '.join(map(repr, DTYPES))}")
    require(m.dtype != "float16", "model.dtype", m.dtype,
            "float16 needs loss scaling, which grpo-lab does not do; use 'bfloat16' or 'auto'")
    require(m.gguf_file is None or m.name == "hf", "model.gguf_file", m.gguf_file, "needs model.name=hf (model=local)")
    check_lora(m.lora, cfg.dist.strategy)
    require(m.logprob_chunk >= 0, "model.logprob_chunk", m.logprob_chunk, "must be >= 0 (0: full logits)")
    require(1 <= m.length_buckets <= MAX_BUCKETS, "model.length_buckets", m.length_buckets,
            f"must be 1-{MAX_BUCKETS} (1: one pass; each further bucket must save 1/8 of the positions, so "
            f"no more than {MAX_BUCKETS} can)")


def check_task(cfg: TrainConfig) -> None:
    """The task named and its own keys (its `check`, grpo_lab/tasks/), then the keys every task reads: how
    difficulty is labelled, and the chat prompt's."""
    t = cfg.task
    task_kind(t.name).check(cfg)
    require(t.difficulty in ("level", "pass_rate"), "task.difficulty", t.difficulty,
            "must be one of 'level', 'pass_rate'")
    require(2 <= t.difficulty_samples <= MAX_SAMPLES_PER_STEP, "task.difficulty_samples", t.difficulty_samples,
            f"must be in [2, {MAX_SAMPLES_PER_STEP:,}] (samples per prompt)")
    require(t.system_prompt is None or t.chat_template, "task.system_prompt", t.system_prompt,
            "needs task.chat_template=true")
    require(not t.shots or cfg.model.name == "hf", "task.shots", t.shots,
            "needs a model=hf tokenizer (model=smollm2, gemma3 or local): the built-in model reads its own format")
    require(all(len(s) == 2 and all(isinstance(x, str) and x for x in s) for s in t.shots), "task.shots", t.shots,
            "must be [user, assistant] pairs of non-empty strings")
    require(t.chat_template is False or cfg.model.name == "hf", "task.chat_template", t.chat_template,
            "needs an instruct model (model=local or model=smollm2); the built-in model has no chat template")


def check_algo(cfg: TrainConfig) -> None:
    """The `algo` block: the step's size and clip, the advantage rule named and every rule's own keys
    (grpo_lab/advantage/), the loss's aggregation, micro-batches, rollout correction and tied units."""
    a = cfg.algo
    require(0 < a.lr < 1, "algo.lr", a.lr,
            "must be in (0, 1): an Adam step moves each weight by about lr, at 1 by more than a weight's size")
    require(a.beta >= 0, "algo.beta", a.beta, "must be >= 0")
    require(0 < a.eps_low < 1, "algo.eps_low", a.eps_low,
            "must be in (0, 1): the ratio is clipped below at 1 - eps_low, which must stay a positive ratio")
    require(0 < a.eps_high <= MAX_EPS_HIGH, "algo.eps_high", a.eps_high,
            f"must be in (0, {MAX_EPS_HIGH:g}]: the ratio is clipped above at 1 + eps_high (DAPO: 0.28); past "
            f"{1 + MAX_EPS_HIGH:g} the clip never binds")
    require(1 <= a.mu <= MAX_MU, "algo.mu", a.mu, f"must be in [1, {MAX_MU}]")
    require(a.std in ("population", "sample", "none"), "algo.std", a.std,
            "must be one of 'population', 'sample', 'none'")
    check_rules(a)
    require(a.loss_agg in ("sequence", "token", "constant"), "algo.loss_agg", a.loss_agg,
            "must be one of 'sequence', 'token', 'constant'")
    require(a.max_grad_norm > 0, "algo.max_grad_norm", a.max_grad_norm, "must be > 0")
    require(0 <= a.weight_decay * a.lr < 1, "algo.weight_decay", a.weight_decay,
            "must be >= 0 with weight_decay x lr < 1 (AdamW scales each weight by 1 - lr x weight_decay a step)")
    top = (cfg.reward.accuracy + cfg.reward.format) / 2  # the largest population std of rewards in [0, a + f]
    require(top <= 0 or 0 <= a.std_eps < top, "algo.std_eps", a.std_eps,
            f"must be in [0, {top:g}): below 0 a tie's zero std is divided by; "
            "at (reward.accuracy + reward.format) / 2 every group is a tie")
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


def check_rollout(cfg: TrainConfig) -> None:
    """The `rollout` keys every engine reads, then the engine named and every engine's own keys
    (grpo_lab/rollout/engines.py)."""
    r = cfg.rollout
    require(MIN_TEMPERATURE <= r.temperature <= MAX_TEMPERATURE, "rollout.temperature", r.temperature,
            f"must be in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]: colder, a group's G answers are nearly always "
            "one answer, so every group ties and nothing trains; hotter, sampling nears a uniform draw over the "
            "vocabulary")
    require(1 <= r.max_new_tokens <= MAX_NEW_TOKENS, "rollout.max_new_tokens", r.max_new_tokens,
            f"must be in [1, {MAX_NEW_TOKENS:,}]")
    require(r.max_rows_per_call is None or r.max_rows_per_call >= 1, "rollout.max_rows_per_call",
            r.max_rows_per_call, "must be >= 1 or null (every row in one call)")
    require(all(isinstance(s, str) and s for s in r.stop), "rollout.stop", r.stop,
            "must be a list of non-empty strings")
    check_engine(cfg)


def check_eval(cfg: TrainConfig) -> None:
    """The `eval` block: samples per held-out prompt, their temperature, and when evaluations fall."""
    e = cfg.eval
    require(0 <= e.n <= MAX_SAMPLES_PER_STEP, "eval.n", e.n,
            f"must be in [0, {MAX_SAMPLES_PER_STEP:,}] (samples per held-out prompt; 0 turns evaluation off)")
    require(e.every >= 0, "eval.every", e.every, "must be >= 0")
    require(e.temperature == 0 or MIN_TEMPERATURE <= e.temperature <= MAX_TEMPERATURE,
            "eval.temperature", e.temperature, f"must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, "
            f"{MAX_TEMPERATURE:g}]: colder is greedy but for float noise, hotter a near-uniform draw")
    require(e.every_samples >= 0, "eval.every_samples", e.every_samples, "must be >= 0 (0: off)")
    require(e.every_tokens >= 0, "eval.every_tokens", e.every_tokens, "must be >= 0 (0: off)")
    require(e.every_updates >= 0, "eval.every_updates", e.every_updates, "must be >= 0 (0: off)")


def check_budgets(cfg: TrainConfig) -> None:
    """How long the run is and what a step draws: max_steps, prompts_per_step, checkpoint_every, one step's draw
    against what a step holds, and max_samples and max_tokens reachable in max_steps."""
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


def check_checkpoint(cfg: TrainConfig) -> None:
    """The `checkpoint` block: which checkpoints pruning keeps."""
    c = cfg.checkpoint
    require(c.keep_last is None or c.keep_last >= 1, "checkpoint.keep_last", c.keep_last,
            "must be >= 1 (the latest checkpoint is needed to resume) or null (keep all)")
    require(all(k >= 1 for k in c.keep_steps), "checkpoint.keep_steps", c.keep_steps, "steps count from 1")


def check_logger(cfg: TrainConfig) -> None:
    """The `logger` block: its backends and how often a line is written."""
    lg = cfg.logger
    for name in lg.backends:
        require(name in LOGGER_BACKENDS, "logger.backends", name,
                f"must be among {', '.join(map(repr, LOGGER_BACKENDS))}")
    require(lg.every_s >= 0, "logger.every_s", lg.every_s, "must be >= 0")
    require(lg.every >= 0, "logger.every", lg.every, "must be >= 0 (0: by time only)")
    require(bool(lg.project) or "wandb" not in lg.backends, "logger.project", lg.project, "must name a W&B project")
    require(lg.wandb_mode in (None, "online", "offline", "disabled"), "logger.wandb_mode", lg.wandb_mode,
            "must be one of null, 'online', 'offline', 'disabled'")


def check_reward(cfg: TrainConfig) -> None:
    """The `reward` block: its weights, and the workers that check answers and their time."""
    r = cfg.reward
    require(1 <= r.workers <= MAX_REWARD_WORKERS, "reward.workers", r.workers, f"must be in [1, {MAX_REWARD_WORKERS}]")
    require(r.accuracy >= 0, "reward.accuracy", r.accuracy, "must be >= 0")
    require(r.format >= 0, "reward.format", r.format, "must be >= 0")
    require(r.accuracy + r.format > 0, "reward.accuracy", r.accuracy,
            "with reward.format=0 every reward is 0: every group ties and nothing trains")


def check_dist(cfg: TrainConfig) -> None:
    """The waits (the reward's and torchrun's) and the `dist` block (read only under torchrun)."""
    for key in ("reward.answer_timeout_s", "reward.step_budget_s", "dist.timeout_s"):
        block, name = key.split(".")
        value = getattr(getattr(cfg, block), name)
        require(0 < value <= MAX_WAIT_S, key, value, f"must be in (0, {MAX_WAIT_S:,}] seconds")
    require(cfg.dist.backend in ("auto", "gloo", "nccl"), "dist.backend", cfg.dist.backend,
            "must be one of 'auto', 'gloo', 'nccl'")
    require(cfg.dist.strategy in STRATEGIES, "dist.strategy", cfg.dist.strategy,
            f"must be one of {', '.join(map(repr, STRATEGIES))}")


def check_local_model(cfg: TrainConfig) -> None:
    """A real model's local files (model=local): there, readable, with no untrusted code, weights whole."""
    m = cfg.model
    if m.name != "hf":
        return
    try:
        check_model_files(m.path, m.gguf_file)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    if m.gguf_file is None:  # a GGUF file holds config, weights and tokenizer in one
        folder = resolve_model_path(m.path)
        require(model_files_present(str(folder)), "model.path", m.path,
                "the folder has no model/tokenizer (needs config.json, weights and tokenizer files)")
        check_model_folder(folder, m.trust_remote_code)  # readable, no untrusted code, weights whole


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
    if cfg.model.name == "hf" and cfg.checkpoint.keep_last is None:
        out.append("checkpoint.keep_last=null with a real model (model.name=hf) keeps every checkpoint whole (its "
                   "weights and AdamW's state, about 3x the model's fp32 size each, at every checkpoint_every and "
                   "evaluation step: GBs a job); checkpoint.keep_last=1 keeps the latest whole and the evaluated "
                   "steps' weights, what a resume and experiments.evaluate need")
    if cfg.model.name == "hf" and cfg.algo.lr >= 1e-5 and not cfg.model.lora.rank:  # LoRA adapters: ~1e-4
        out.append(f"algo.lr={cfg.algo.lr:g} with a real model (model.name=hf): that is the built-in model's rate; "
                   "pretrained LLMs are trained near 1e-6 (TRL's default) and collapse at 1e-4 (LoRA adapters: "
                   "model.lora.rank)")
    out += rule(cfg.algo.advantage).advice(cfg)
    out += SAMPLERS[cfg.sampler.name].advice(cfg)
    scheduled = [f"eval.{k}={getattr(cfg.eval, k)}" for k in ("every", "every_samples", "every_tokens", "every_updates")
                 if getattr(cfg.eval, k)]
    if not cfg.eval.n and scheduled:
        out.append(f"eval.n=0 (eval=none) with {', '.join(scheduled)}: nothing is evaluated during the run; those "
                   "points only choose the checkpoints saved, for a later python -m experiments.evaluate")
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
