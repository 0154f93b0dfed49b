"""What the entry points share: structured configs in Hydra's ConfigStore, turning a composed
DictConfig into the library's dataclass, and a preflight that rejects a bad override (in one
line naming the key) before any job starts or any model loads."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import re
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import MissingMandatoryValue

from grpo_lab.config import EvalJobConfig, TrainConfig
from grpo_lab.config.checks import advice, validate
from grpo_lab.config.reads import refuse_unread
from grpo_lab.errors import ConfigError, InputError

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
SCHEMAS: dict[str, type] = {"train": TrainConfig, "evaluate": EvalJobConfig}
# Hydra's flags that print a config or help and run nothing
INSPECT_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc",
                 "--resolve"}
REQUIRED = {"run_dir": "DIR (a run directory: runs/<date>/<time> or a sweep's job folder multirun/<date>/<time>/<n>)"}
# Hydra's flags that take the next argument as their value (--info's is optional: a known word)
FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                    "--config-dir", "-cd", "--experimental-rerun", "--shell-completion", "-sc"}
OPTIONAL_VALUE = {"--info": {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"},
                  "-i": {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}}


def register_configs() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
    ConfigStore.instance().store(name="evaluate_schema", node=EvalJobConfig)


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """The typed config of this job, its run directory Hydra's job output folder; validated once, by `train()`,
    as it is final (the preflight checked every job before any started)."""
    out = as_object("train", cfg)
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        out.out_dir = hc.runtime.output_dir
        multirun = hc.mode is not None and hc.mode.name == "MULTIRUN"
        out.logger.name = out.logger.name or run_name(hc, multirun)
        if out.logger.group is None and multirun:
            out.logger.group = hc.sweep.dir  # a sweep's jobs side by side in W&B
    return out


def run_name(hc: Any, multirun: bool) -> str | None:
    """A job's name in W&B: in a sweep, the values of the swept keys ("sampler.name=fixed,seed=1");
    else the command line's overrides; None (the run id) when there are none."""
    changed = [o for o in hc.overrides.task if not o.startswith(("hydra", "logger"))]
    if multirun:
        swept = set((hc.sweeper.get("params") or {}).keys())
        record = Path(hc.sweep.dir) / "multirun.yaml"  # the sweep's own command line, written before any job
        if record.exists():
            swept |= {c[0].split("=")[0] for c in _sweep_choices(list(OmegaConf.load(record).hydra.overrides.task))[1]}
        changed = [o for o in changed if o.split("=")[0].lstrip("+~") in swept] or [f"job {hc.job.num}"]
    return ",".join(changed) or None


def one_line(error: BaseException) -> str:
    """A Hydra/OmegaConf error, causes included, as one line that names the key."""
    parts: list[str] = []
    while error is not None:
        lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
        if lines and "$VALUE" not in lines[0]:  # OmegaConf repeats the message as a template
            parts.append(lines[0])
            options = [ln for ln in lines[1:] if "Available options" in ln]
            if options:  # an unknown group option: list the allowed ones
                k = lines.index(options[0])
                allowed = [ln for ln in lines[k + 1:] if not ln.startswith(("Config search", "provider="))]
                parts.append(f"allowed: {', '.join(allowed)}")
        error = error.__cause__ or error.__context__
    return re.sub(r"\s+", " ", ": ".join(dict.fromkeys(parts)))


def _sweep_choices(overrides: list[str]) -> tuple[list[str], list[list[str]]]:
    """Split command-line overrides into fixed ones and, per swept key, its 'key=value' choices."""
    fixed, swept = [], []
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_sweep_override():
            key = o.get_key_element()
            swept.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            fixed.append(o.input_line)
    return fixed, swept


def task_overrides(args: list[str]) -> list[str]:
    """The config overrides of a Hydra command line: flags, their values and hydra.* keys dropped."""
    out, skip, previous = [], False, ""
    for a in args:
        if skip or a.startswith("hydra.") or a.startswith("hydra/") or a in OPTIONAL_VALUE.get(previous, ()):
            skip = False
        elif a.startswith("-"):
            skip = a in FLAGS_WITH_VALUE
        else:
            out.append(a)
        previous = a
    return out


def hydra_overrides(args: list[str]) -> list[str]:
    """The command line's overrides of Hydra's own config (`hydra.run.dir=...`, `hydra/launcher=...`)."""
    return [a for a in args if a.startswith(("hydra.", "hydra/"))]


def _plan(config_name: str, args: list[str]) -> tuple[DictConfig, list[str], list[list[str]]]:
    """What a command line runs: its config composed with the fixed overrides (Hydra's node included), those
    overrides, and per swept key its 'key=value' choices (the preset's sweeper params included)."""
    fixed, swept = _sweep_choices(task_overrides(args))
    base = compose(config_name, overrides=hydra_overrides(args) + fixed, return_hydra_config=True)
    params = base.hydra.sweeper.get("params") or {}
    on_command_line = {o.split("=")[0].lstrip("+~") for o in fixed} | {c[0].split("=")[0] for c in swept}
    swept += _sweep_choices([f"{k}={v}" for k, v in params.items() if k not in on_command_line])[1]
    return base, fixed, swept


def _trials(fixed: list[str], swept: list[list[str]]) -> list[tuple[list[str], str | None]]:
    """Every swept value at least once: the first value of each swept key, then one key moved off its first
    value at a time, the others at theirs. Each trial's overrides, and the choice that moved (None first)."""
    first = fixed + [c[0] for c in swept]
    return [(first, None)] + [(fixed + [choice if k == j else c[0] for k, c in enumerate(swept)], choice)
                              for j, choices in enumerate(swept) for choice in choices[1:]]


def compose_plan(config_name: str, args: list[str]) -> tuple[list[Any], DictConfig]:
    """The typed config of each job this command line would run, validated: every swept value at
    least once (the preset's sweeper params included), and the composed base config with Hydra's
    node (its run and sweep folders, sweeper params). Raises on the first bad value.
    The first trial is composed; a trial that moves one plain value is that config with the value set
    (`_with_value`), so a sweep of ten seeds composes once (each compose takes about a second)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        base, fixed, swept = _plan(config_name, args)
        trials = _trials(fixed, swept)
        head = _without_hydra(base) if not swept else compose(config_name, overrides=trials[0][0])
        choices = dict(base.hydra.runtime.choices)
        typed_keys = {o.split("=")[0].lstrip("+~") for o in task_overrides(args)}  # not the preset's sweep
        jobs = [as_object(config_name, _choices_kept(head, trials[0][0], choices, typed_keys))]
        for overrides, moved in trials[1:]:
            cfg = _with_value(head, moved)
            cfg = cfg if cfg is not None else compose(config_name, overrides=overrides)  # a group moved
            jobs.append(as_object(config_name, _choices_kept(cfg, overrides, choices, typed_keys)))
        if config_name == "train":  # a key set that no job reads, before its value is judged
            unread = refuse_unread(jobs, *_keys_set(fixed, swept))
            if unread:
                raise ConfigError(unread)
        for job in jobs:
            if isinstance(job, TrainConfig):
                validate(job)
        return jobs, base


def _keys_set(fixed: list[str], swept: list[list[str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The plain keys a command sets: {key: the override as typed} of the fixed overrides, and {key: its values}
    of the swept ones (the preset's sweep included); config groups (`sampler=pods`), deletions and hydra.* left out:
    a group's own keys are the preset's, not the user's."""
    out: tuple[dict[str, str], dict[str, list[str]]] = ({}, {})
    for into, lines in ((out[0], fixed), (out[1], [c[0] for c in swept])):
        for k, o in enumerate(OverridesParser.create().parse_overrides(lines)):
            key = o.key_or_group
            if o.package is None and o.type != OverrideType.DEL and not key.startswith("hydra") and not _is_group(key):
                into[key] = o.input_line if into is out[0] else [c.split("=", 1)[1] for c in swept[k]]
    return out


def compose_jobs(config_name: str, args: list[str]) -> list[Any]:
    """compose_plan's jobs."""
    return compose_plan(config_name, args)[0]


def compose_each_job(config_name: str, args: list[str]) -> list[Any]:
    """compose_jobs the plain way, every trial composed on its own: the reference it is tested against."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        _, fixed, swept = _plan(config_name, args)
        return [typed(config_name, compose(config_name, overrides=o)) for o, _ in _trials(fixed, swept)]


_ABSENT = object()


def _without_hydra(cfg: DictConfig) -> DictConfig:
    """A config composed with return_hydra_config=True, as compose() without it returns it."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        del out["hydra"]
    return out


def _with_value(cfg: DictConfig, choice: str) -> DictConfig | None:
    """`cfg` with one plain `key=value` override applied, as composing with it would give (Hydra applies value
    overrides after the defaults, so this is the same config), at a fraction of a compose's cost: a sweep of
    ten seeds composes once. None for anything else (a config group, +/~, a dict, an interpolation, a value
    of the wrong type): the caller composes, which gives Hydra's own result or error message."""
    o = OverridesParser.create().parse_overrides([choice])[0]
    key, value = o.key_or_group, o.value()
    if (o.type != OverrideType.CHANGE or o.package is not None or key.startswith("hydra") or
            _is_group(key) or isinstance(value, dict) or "${" in str(value)):
        return None
    if OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
        return None
    out = copy.deepcopy(cfg)
    try:
        OmegaConf.update(out, key, value, merge=False)
    except Exception:  # noqa: BLE001 - a missing key or a mistyped value: compose names it
        return None
    return out


def _is_group(key: str) -> bool:
    """Whether an override's key names a config group (`eval`, `hydra/launcher`): a folder of conf/."""
    return (Path(CONF_DIR) / key.replace(".", "/")).is_dir()


@functools.lru_cache(maxsize=None)
def _option_values(group: str, option: str) -> dict[str, Any]:
    """The leaf keys a config group's option sets, as full dotted keys of the composed config, with their values
    (its `defaults` list and interpolations left out; {} for an option that is not a file of conf/)."""
    path = Path(CONF_DIR) / group / f"{option}.yaml"
    if not path.is_file():
        return {}
    header = re.search(r"^# @package (\S+)", path.read_text(), re.M)
    package = header.group(1) if header else group.replace("/", ".")
    node = OmegaConf.load(path)
    out = {}
    for key in _leaf_keys(node):
        value = OmegaConf.select(node, key)
        if key.split(".")[0] != "defaults" and not (isinstance(value, str) and "${" in value):
            out[key if package == "_global_" else f"{package}.{key}"] = OmegaConf.to_container(value) \
                if isinstance(value, (DictConfig, ListConfig)) else value
    return out


def _choices_kept(cfg: DictConfig, overrides: list[str], choices: dict[str, Any], typed_keys: set[str]) -> DictConfig:
    """`cfg`, once every config group chosen on the command line (`eval=none`) is checked to hold in it. An
    experiment's own keys and its sweep, and a global option later in the defaults list, are applied after the
    groups, so they can silently undo a choice (`experiment=smollm2_ties eval=none` evaluated anyway): a
    ConfigError names the key, both values and who set it. Keys the user typed (`typed_keys`: `eval.n=0`) win
    and are not checked; an experiment's keys are meant to be varied by the arms it sweeps, so `experiment=`
    is not."""
    parsed = OverridesParser.create().parse_overrides([o for o in overrides if not o.startswith("hydra")])
    given = [o.key_or_group for o in parsed if o.key_or_group in typed_keys and not _is_group(o.key_or_group)]
    choices = {**choices, **{o.key_or_group: o.value() for o in parsed if _is_group(o.key_or_group)}}
    for o in parsed:
        group = o.key_or_group
        if o.package is not None or group == "experiment" or not _is_group(group) or not isinstance(o.value(), str):
            continue
        for key, wanted in _option_values(group, o.value()).items():
            if key.startswith("hydra.") or any(key == g or key.startswith(f"{g}.") for g in given):
                continue
            found = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
            found = OmegaConf.to_container(found) if isinstance(found, (DictConfig, ListConfig)) else found
            if found is _ABSENT or found == wanted:
                continue
            setters = [f"{g}={c}" for g, c in choices.items() if g != group and isinstance(c, str)
                       and _option_values(g, c).get(key, _ABSENT) == found]
            setters += [f"the sweep's {key}" for o2 in parsed if o2.key_or_group == key]
            by = f" (set by {', '.join(setters)}, which is applied later)" if setters else ""
            raise ConfigError(f"{group}={o.value()} sets {key}={wanted!r}, but the composed config has "
                              f"{key}={found!r}{by}: add {key}={wanted!r} to the command line to keep the choice, "
                              f"or drop {group}={o.value()}")
    return cfg


def compose_job(config_name: str, overrides: list[str]) -> Any:
    """The typed config of one job with exactly these overrides (a sweep's job k)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return typed(config_name, compose(config_name, overrides=overrides))


def preflight_plan(config_name: str, args: list[str]) -> tuple[list[Any], DictConfig | None, str | None]:
    """compose_plan without raising: (jobs, base, None), or ([], None, one line naming the bad key)."""
    try:
        return (*compose_plan(config_name, args), None)
    except InputError as e:  # a bad key, or a data file that cannot be used
        return [], None, str(e)
    except MissingMandatoryValue as e:  # a key with no default the command line must give
        key = e.full_key or "?"
        return [], None, f"{key} is required: add {key}={REQUIRED.get(key, 'VALUE')}"
    except Exception as e:  # noqa: BLE001 - Hydra and OmegaConf raise many types; all are config errors here
        message = one_line(e)
        unknown = re.search(r"Could not override '([^']+)'", message)
        return [], None, message + (did_you_mean(config_name, unknown.group(1)) if unknown else "")



def preflight(config_name: str, args: list[str]) -> tuple[list[Any], str | None]:
    """compose_jobs without raising: (the jobs' configs, None), or ([], one line naming the bad key)."""
    jobs, _, error = preflight_plan(config_name, args)
    return jobs, error


def schema_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key of a config dataclass, nested dataclasses expanded: "sampler.group_size", ..."""
    keys = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys += schema_keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def did_you_mean(config_name: str, key: str) -> str:
    """"; did you mean 'sampler.group_size'?" for a mistyped key, or "" when nothing is close. A key that
    moved into a block (`sampler.max_rounds`) names every key of its group that ends the same way."""
    key = key.lstrip("+~")
    known = schema_keys(SCHEMAS[config_name])
    group, _, leaf = key.rpartition(".")
    # a key that moved into a block (sampler.max_rounds), or a bare key of a group (pool=all)
    moved = [k for k in known if k.startswith(f"{group}.") and k.endswith(f".{leaf}") and k != key] if group else \
        [k for k in known if k.endswith(f".{leaf}")]
    close = moved or difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def _leaf_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    out = []
    for k, v in cfg.items_ex(resolve=False):
        out += _leaf_keys(v, f"{prefix}{k}.") if isinstance(v, DictConfig) else [f"{prefix}{k}"]
    return out


@functools.lru_cache(maxsize=None)
def _schema(config_name: str) -> DictConfig:
    """The schema as a config, made once (half a second each time: a sweep's preflight types many jobs)."""
    return OmegaConf.structured(SCHEMAS[config_name])


def typed(config_name: str, cfg: DictConfig) -> Any:
    """A composed config as its dataclass (SCHEMAS), validated when it is a TrainConfig."""
    obj = as_object(config_name, cfg)
    if isinstance(obj, TrainConfig):
        validate(obj)
    return obj


def _in_dict(key: str, known: set[str]) -> bool:
    parts = key.split(".")
    return any(".".join(parts[:i]) in known for i in range(1, len(parts)))


def as_object(config_name: str, cfg: DictConfig) -> Any:
    """A composed config as its dataclass (SCHEMAS), not yet validated. A key the schema lacks (added with
    `+key=...`) is an error, not silently dropped."""
    known = set(schema_keys(SCHEMAS[config_name]))
    for key in _leaf_keys(cfg):
        # a key under a known leaf is an entry of a dict-typed key (task.gym.config.allow_negation), the dict's own
        if key not in known and key.split(".")[0] != "hydra" and not _in_dict(key, known):
            raise ConfigError(f"{key} is not a config key{did_you_mean(config_name, key)}")
    return OmegaConf.to_object(OmegaConf.merge(_schema(config_name), cfg))  # merge copies the schema


def config_warnings(jobs: list[Any]) -> list[str]:
    """Each distinct warning (`grpo_lab.config.checks.advice`) of the jobs a command would run, once."""
    return list(dict.fromkeys(w for job in jobs if isinstance(job, TrainConfig) for w in advice(job)))
