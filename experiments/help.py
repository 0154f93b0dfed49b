"""`python -m experiments.train --help`: the config groups and every key with its meaning, read from the
comments beside each field of the config dataclasses (grpo_lab/config/schema.py, grpo_lab/samplers/*.py), so the
help cannot drift from the code."""

from __future__ import annotations

import dataclasses
import inspect
import io
import tokenize
from functools import cache
from pathlib import Path

# the keys a first study turns (the rest are listed after them)
MAIN_KEYS = ("sampler.name", "sampler.group_size", "max_samples", "max_steps", "prompts_per_step", "seed",
             "algo.lr", "algo.beta", "algo.loss_agg", "rollout.temperature", "rollout.max_new_tokens", "eval.n",
             "eval.every_samples", "task.levels", "model.path", "task.path")


@cache
def _comments(cls: type) -> dict[str, str]:
    """{field: the comment on its line, or on the lines just above it} of a dataclass's source."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # made at run time (grpo_lab/config/blocks.py): no source of its own
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    lines = source.splitlines()
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    trailing = {t.start[0]: t.string.lstrip("# ").strip() for t in tokens if t.type == tokenize.COMMENT
                and lines[t.start[0] - 1].strip() != t.string.strip()}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("# ").strip())
            continue
        name = text.split(":", 1)[0].strip()
        if ":" in text and name.isidentifier() and not text.startswith(("def ", "class ", "@")):
            out[name] = " ".join([*above, trailing.get(number, "")]).strip()
        above = []
    return out


def _comment(cls: type, name: str) -> str:
    """A field's comment in the class that writes it out (a block made from a registry inherits its shared keys)."""
    return next((c[name] for c in map(_comments, cls.__mro__) if name in c), "")


def key_help(cls: type, prefix: str = "") -> list[tuple[str, object, str]]:
    """(dotted key, default, meaning) for every leaf key of a config dataclass."""
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows += key_help(type(default), f"{prefix}{f.name}.")
        else:
            rows.append((f"{prefix}{f.name}", default, f.metadata.get("help") or _comment(cls, f.name)))
    return rows


def groups(conf_dir: Path) -> dict[str, list[str]]:
    """Config groups and their options, from the conf folder."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(conf_dir.iterdir()) if d.is_dir()}


def train_help(conf_dir: Path) -> str:
    from grpo_lab.config import TrainConfig

    rows = key_help(TrainConfig)
    width = max(len(f"{k}={v}") for k, v, _ in rows if k in MAIN_KEYS)

    def line(key: str, default: object, meaning: str) -> str:
        shown = "null" if default is None else default
        return f"  {f'{key}={shown}':<{width}}  {meaning}"

    out = ["Train GRPO jobs: one run, or a sweep with -m (one job per combination of swept values).", "",
           "  python -m experiments.train [group=option ...] [key=value ...]",
           "  python -m experiments.train -m sampler=fixed,resample_on_tie seed=0,1,2 max_samples=8192", "",
           "Config groups (group=option):"]
    out += [f"  {name}: {', '.join(options)}" for name, options in groups(conf_dir).items()]
    out += ["", "Main keys (key=default, meaning):"]
    out += [line(k, v, m) for k, v, m in rows if k in MAIN_KEYS]
    out += ["", "Every key:"]
    out += [line(k, v, m) for k, v, m in rows]
    out += ["", "A bad value, or a key set where no chosen option reads it (sampler.pods.n without sampler=pods), is "
            "refused in one line before anything loads. The composed config of a command: "
            "--cfg job. Hydra's own help: --hydra-help. The ten keys that matter most and an FAQ: docs/GUIDE.md."]
    return "\n".join(out)


def evaluate_help() -> str:
    from grpo_lab.config import EvalJobConfig

    rows = [(k, "null" if v is None else str(v).lower() if isinstance(v, bool) else v, m)
            for k, v, m in key_help(EvalJobConfig)]
    width = max(len(f"{k}={v}") for k, v, _ in rows)
    return "\n".join(["Evaluate a run directory: the base model and its checkpoints, n samples per held-out prompt",
                      "(the run's own config.json gives model and task). Rows at the run's own settings (eval.n,",
                      "eval.temperature) are its eval parts; rows at other settings go beside them, tagged with the",
                      "settings (eval/part-000030-n4-t0.5-p1-m6.parquet), and every row records n, temperature, top_p",
                      "and max_new_tokens. Rows already there at the same settings are replaced only with",
                      "overwrite=true; each evaluation is recorded in <run>/evaluations.jsonl.", "",
                      "  python -m experiments.evaluate run_dir=multirun/2026-11-30/10-00-00/0 n=32", "", "Keys:",
                      *(f"  {f'{k}={v}':<{width}}  {m}" for k, v, m in rows)])
