"""Which keys each option reads. A key that only some option reads does nothing in a job that chose another:
`-m sampler.pods.n=8,16` without sampler=pods ran two identical arms, and `model.path=DIR` without model=local
trained the built-in model. Each option here names the keys only it reads, taken from the code that reads them:
the registries give every member with keys of its own its block (`sampler.<name>.*`, `rollout.<name>.*`,
`task.<name>.*`, `algo.<name>.*`), each task and rule names the shared keys only it reads, and the rest are listed below
beside the option that chooses them. `unread` is generic over that data; the preflight (experiments/common.py) refuses,
in one line, a key the user set that no job of the command reads, and a swept key that some job does not read (its jobs
would differ in nothing that runs).

A key no option claims is read by every job. Not claimed, though some jobs never read them: `dist.*` (read only
under torchrun, which no config key chooses)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any, Callable

from grpo_lab.advantage import RULES
from grpo_lab.rollout.engines import ENGINES
from grpo_lab.samplers import SAMPLERS
from grpo_lab.tasks import TASKS


@dataclass(frozen=True)
class Option:
    """A choice some keys exist for: the key whose value makes it, whether a value does, how a user makes it
    (for messages), and the keys only it reads (a block, "sampler.pods", stands for every key under it)."""

    key: str
    chosen: Callable[[Any], bool]
    name: str
    reads: tuple[str, ...]


def _one_of(*values: Any) -> Callable[[Any], bool]:
    return lambda value: value in values


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 0


def _has(item: str) -> Callable[[Any], bool]:
    return lambda value: item in list(value or ())


def own_keys(block: str, name: str, member: Any) -> tuple[str, ...]:
    """The keys only a rule or task reads: the shared keys it names, and its own block where it has one."""
    return (*member.keys, *((f"{block}.{name}",) if member.settings_type is not None else ()))


GROUP_SIZE_READERS = tuple(name for name, cls in SAMPLERS.items() if cls.reads_group_size)
STD_READERS = tuple(name for name, cls in RULES.items() if cls.reads_std)  # rules whose advantages use algo.std

OPTIONS: tuple[Option, ...] = (
    *(Option("sampler.name", _one_of(name), f"sampler={name}", (f"sampler.{name}",))
      for name, cls in SAMPLERS.items() if cls.settings_type is not None),
    # a sampler with a round size of its own (ar3po) never reads the shared group size: its weights' G cancels
    Option("sampler.name", _one_of(*GROUP_SIZE_READERS), "a sampler of sampler.group_size answers a prompt "
           f"(every sampler but {', '.join(n for n in SAMPLERS if n not in GROUP_SIZE_READERS)})",
           ("sampler.group_size",)),
    *(Option("task.name", _one_of(name), f"task={name}", own_keys("task", name, cls)) for name, cls in TASKS.items()),
    Option("model.name", _one_of("hf"), "model=local (model.name=hf)",
           ("model.path", "model.gguf_file", "model.trust_remote_code", "task.shots")),
    Option("model.lora.rank", _positive, "model.lora.rank > 0 (LoRA adapters)",
           ("model.lora.alpha", "model.lora.targets", "model.lora.dropout")),
    # a rule that divides by its own std (ngrpo) never reads algo.std; a rule's own keys only it reads
    Option("algo.advantage", _one_of(*STD_READERS), f"algo.advantage={' or '.join(STD_READERS)}", ("algo.std",)),
    *(Option("algo.advantage", _one_of(name), f"algo.advantage={name}", own_keys("algo", name, cls))
      for name, cls in RULES.items() if own_keys("algo", name, cls)),
    # eval.every, every_samples, every_tokens and every_updates also choose the steps saved as checkpoints: read with
    # eval.n=0 too
    Option("eval.n", _positive, "eval.n > 0 (evaluation on)", ("eval.temperature",)),
    Option("task.difficulty", _one_of("pass_rate"), "task.difficulty=pass_rate",
           ("task.difficulty_samples", "eval.temperature")),  # the base model's pass rates are sampled as eval's
    Option("task.chat_template", _one_of(True), "task.chat_template=true", ("task.system_prompt",)),
    Option("checkpoint.keep_last", lambda value: value is not None, "checkpoint.keep_last=N (pruning)",
           ("checkpoint.keep_steps", "checkpoint.keep_eval")),
    *(Option("rollout.engine", _one_of(name), f"rollout.engine={name}", (f"rollout.{name}",))
      for name, cls in ENGINES.items() if cls.settings_type is not None),
    Option("logger.backends", _has("console"), "a console logger (logger=console, tensorboard or many)",
           ("logger.every_s", "logger.every", "logger.name", "logger.group")),
    Option("logger.backends", _has("wandb"), "logger=wandb (or many)",
           ("logger.project", "logger.wandb_mode", "logger.name", "logger.group")),
)


def owners(key: str) -> list[Option]:
    """The options that read `key` (a key of a block an option reads included); [] for a key every job reads."""
    return [o for o in OPTIONS if any(key == k or key.startswith(f"{k}.") for k in o.reads)]


def value_of(cfg: Any, key: str) -> Any:
    """A dotted key's value in a config dataclass."""
    return reduce(getattr, key.split("."), cfg)


def unread(key: str, cfg: Any) -> list[Option]:
    """The options that would read `key`, when the job `cfg` (a TrainConfig) chose none of them; [] when the
    job reads it."""
    found = owners(key)
    return [] if any(o.chosen(value_of(cfg, o.key)) for o in found) else found


def choices_text(options: list[Option], jobs: list[Any]) -> str:
    """What the jobs chose for the keys that make `options`: "sampler.name=fixed" or "sampler.name=fixed, dynamic"."""
    out = []
    for key in dict.fromkeys(o.key for o in options):
        values = list(dict.fromkeys(repr(v) if isinstance(v, str) and not v else str(v)
                                    for v in (value_of(job, key) for job in jobs)))
        out.append(f"{key}={', '.join(values)}")
    return "; ".join(out)


# keys the launcher sets for every job, whatever the user typed: a value typed for them would be dropped in silence
SET_BY_LAUNCHER = {"out_dir": "the job's folder, set from hydra.run.dir (a sweep's jobs: hydra.sweep.dir); "
                              "set that instead"}


def refuse_unread(jobs: list[Any], fixed: dict[str, str], swept: dict[str, list[str]]) -> str | None:
    """One line refusing the first key set by the user (`fixed`: key -> the override as typed) that no job reads,
    or the first swept key (`swept`: key -> its values) that some job does not read; None when every key set is
    read. `jobs`: the config of each job the command runs (each swept value at least once)."""
    for key in [*fixed, *swept]:
        if key in SET_BY_LAUNCHER:
            return f"{fixed.get(key, key)} is not read: {key} is {SET_BY_LAUNCHER[key]}"
    for key, typed in fixed.items():
        found = owners(key)
        if found and all(unread(key, job) for job in jobs):
            names = " or ".join(o.name for o in found)
            runs = (f"this job runs {choices_text(found, jobs)}" if len(jobs) == 1 else
                    f"none of the {len(jobs)} jobs composed does (they run {choices_text(found, jobs)})")
            return f"{typed} is read only by {names}; {runs}"
    for key, values in swept.items():
        idle = [job for job in jobs if unread(key, job)]
        if idle:
            found = owners(key)
            names = " or ".join(o.name for o in found)
            return (f"{key} is swept ({', '.join(values)}) but read only by {names}, which the jobs with "
                    f"{choices_text(found, idle[:1])} do not run: they would be identical but for a key nothing "
                    f"reads; sweep {key} only where every job runs {names}")
    return None
