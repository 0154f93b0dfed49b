"""A job's configuration as flat columns, and the command that launched a run or sweep.

Hydra writes the composed job config to `<run>/.hydra/config.yaml` (nested); it is flattened
to dotted keys ("sampler.group_size") and given short aliases for the keys the analyses use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

# alias -> dotted keys it is read from, first present wins
ALIASES: dict[str, tuple[str, ...]] = {
    "seed": ("seed",),
    "sampler": ("sampler.name", "sampler"),  # `sampler: fixed`, a plain value, is read as its name
    "group_size": ("sampler.group_size",),
    "temperature": ("rollout.temperature",),
    "difficulty_mode": ("task.difficulty",),
    "experiment": ("experiment", "experiment.name"),
}

CHOICES = ("sampler", "experiment")  # aliases that are a config group's choice: the spelling a sweep uses


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {"a.b.c": leaf}. Lists become their JSON text, so every value is hashable."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple, Mapping)):
            flat[name] = json.dumps(value, default=str)
        else:
            flat[name] = value
    return flat


def read_config(path: Path) -> dict[str, Any]:
    """A YAML config as plain containers, interpolations resolved where they can be.

    Outside Hydra its resolvers (`${hydra:...}`, `${now:...}`) are unknown; such a config is
    kept unresolved rather than refused.
    """
    if path.suffix == ".json":  # the trainer's config.json: flat dotted keys, already plain values
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path.name} is not a JSON object")
        return data
    cfg = OmegaConf.load(path)
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException:
        return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


CONFIG_FILES = (".hydra/config.yaml", "config.json")  # Hydra's record; else the one the trainer saves at start


def config_source(run_dir: Path) -> Path | None:
    """The file holding the job's config, or None when there is none."""
    return next((run_dir / name for name in CONFIG_FILES if (run_dir / name).is_file()), None)


def job_config(run_dir: Path) -> dict[str, Any]:
    """The job's flattened config plus alias columns; {} (aliases None) when the job left no config."""
    return with_aliases(flat_config(run_dir), run_dir)


# keys a run made before they existed ran with a value of their own (grpo_lab/run/guards.py's ABSENT_MEANS): the
# trainer's config.json holds the value a run went on with (a relaunch of an old run rewrites Hydra's record with
# today's default, which it did not run with), and a config that lacks the key ran with this value
AS_IT_RAN = {"algo.tied_batch": "skip"}


def flat_config(run_dir: Path) -> dict[str, Any]:
    """The job's flattened config as it was written (no aliases), each key of AS_IT_RAN as the run ran with it;
    {} when the job left no config."""
    config_path = config_source(run_dir)
    if config_path is None:
        return {}
    flat = flatten(read_config(config_path))
    trainer = run_dir / "config.json"
    ran = read_config(trainer) if config_path.name != "config.json" and trainer.is_file() else flat
    for key, value in AS_IT_RAN.items():
        if not (run_dir / ".grpo-lab-ingest").exists():  # a grpo-lab run's config, not another tool's ingested run
            flat[key] = ran.get(key, flat.get(key, value) if ran is flat else value)
    return flat


def with_aliases(flat: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """`flat` (a job's `flat_config`) with its alias columns added, and a column for each config group its command
    line chose whose name is no key of the config (`arm=grpo`, `algo=dapo`: a preset that sets several keys under
    other names), named in `choices` (JSON): the arm a user swept is then named as the user named it."""
    flat = dict(flat)
    for alias, sources in ALIASES.items():
        flat[alias] = next((flat[s] for s in sources if s in flat), None)
    overrides = job_overrides(run_dir)
    if flat["experiment"] is None:  # a `# @package _global_` preset leaves its name only in the overrides
        flat["experiment"] = _override_value(overrides, "experiment")
    chosen = {}
    for item in overrides:
        name, _, value = item.lstrip("+~").partition("=")
        if name and "." not in name and "/" not in name and name not in flat and not name.startswith("hydra"):
            chosen[name] = value
    return {**flat, **chosen, "choices": json.dumps(sorted(chosen))}


def shape_conflicts(flats: list[dict[str, Any]]) -> dict[int, str]:
    """Jobs whose config has another shape than the others' (a key that is a plain value in some
    jobs and a mapping in others, as `sampler: fixed` beside `sampler: {name: fixed, ...}`): the
    minority shape's jobs (the plain ones on a tie), each with the reason, by index into `flats`."""
    keys = [set(flat) for flat in flats]
    parents = [{k.rsplit(".", n)[0] for k in found for n in range(1, k.count(".") + 1)} for found in keys]
    conflicts: dict[int, str] = {}
    for key in sorted(set().union(*keys) & set().union(*parents)):
        plain = [i for i, found in enumerate(keys) if key in found]
        nested = [i for i, found in enumerate(parents) if key in found]
        below = sorted({k for i in nested for k in keys[i] if k.startswith(key + ".")})
        mapping = f"a mapping ({', '.join(below[:3])}{', ...' if len(below) > 3 else ''})"
        odd, usual = (plain, nested) if len(plain) <= len(nested) else (nested, plain)
        for i in odd:
            mine = f"the plain value {flats[i][key]!r}" if i in plain else mapping
            theirs = mapping if i in plain else "a plain value"
            conflicts.setdefault(i, f"its config has another shape: `{key}` is {mine} where {len(usual)} other "
                                    f"job{'s' * (len(usual) != 1)} have {theirs}")
    return conflicts


def job_overrides(run_dir: Path) -> list[str]:
    """The job's command-line overrides (`.hydra/overrides.yaml`), [] when absent."""
    path = run_dir / ".hydra" / "overrides.yaml"
    return [str(o) for o in (yaml.safe_load(path.read_text()) or [])] if path.exists() else []


def launch_command(root: Path) -> str | None:
    """The command that launched a sweep (`multirun.yaml`) or a run (`.hydra/hydra.yaml`), rebuilt
    from Hydra's job name and task overrides; None when Hydra left neither file."""
    for path, multirun in ((root / "multirun.yaml", True), (root / ".hydra" / "hydra.yaml", False)):
        if path.exists():
            hydra = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
            name = (hydra.get("job") or {}).get("name") or "<job>"
            overrides = (hydra.get("overrides") or {}).get("task") or []
            return " ".join([name, *(["-m"] if multirun else []), *map(str, overrides)])
    return None


def report_against(root: Path) -> str | None:
    """The report a sweep is read against (`hydra.callbacks.report.against`, set by its experiment), as Hydra kept
    it in the sweep's multirun.yaml; None where it names none."""
    path = root / "multirun.yaml"
    if not path.exists():
        return None
    hydra = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
    against = ((hydra.get("callbacks") or {}).get("report") or {}).get("against")
    return str(against) if against else None


def _report_option(hydra: object, key: str) -> str | None:
    """`callbacks.report.<key>` of a `hydra` block, as text; None where it is not there."""
    node = hydra
    for name in ("callbacks", "report", key):
        node = node.get(name) if isinstance(node, dict) else None
    return str(node) if node else None


def report_published(root: Path, project: Path) -> str | None:
    """The published table a sweep's report reads beside it (`hydra.callbacks.report.published`, relative to the
    project's root): as Hydra kept it in the sweep's multirun.yaml (a run's .hydra/hydra.yaml), else as the
    project's own `conf/experiment/<name>.yaml` names it now where the sweep's overrides chose `experiment=<name>`
    (a comparison added after the sweep ran); None where neither names one."""
    for path in (root / "multirun.yaml", root / ".hydra" / "hydra.yaml"):
        if path.exists():
            hydra = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
            break
    else:
        return None
    if named := _report_option(hydra, "published"):
        return named
    overrides = (hydra.get("overrides") or {}).get("task") or []
    experiment = _override_value([str(o) for o in overrides], "experiment")
    folder = (project / "conf" / "experiment").resolve()
    preset = (folder / f"{experiment}.yaml").resolve() if experiment else None
    if preset is None or folder not in preset.parents or not preset.is_file():
        return None
    return _report_option((yaml.safe_load(preset.read_text()) or {}).get("hydra"), "published")


def _override_value(overrides: list[str], key: str) -> str | None:
    for item in overrides:
        name, _, value = item.lstrip("+~").partition("=")
        if name == key:
            return value
    return None
