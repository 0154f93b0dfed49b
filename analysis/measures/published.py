"""A published study's table read beside this one: each of its arms' difference from its baseline, and this study's
difference of the counterpart arm from the counterpart baseline at each alignment it has (marin #8765's round-2
table on SmolLM2, say).

A published table is a YAML file (`analysis/published/*.yaml`, read with `yaml.safe_load`: nothing in it runs)
holding one score an arm, its source, what the score measures and at which alignment, the seeds, the baseline arm,
each arm's counterpart here (or none) and the study's settings, for a table beside this study's own (`FIELDS`).
A file that cannot be read is one line naming it and the key (`PublishedUnreadable`), before anything is written.

Each row's `agrees`:

- same sign / opposite sign: this study resolves its difference (`stats.seeds.detectable`: its interval over
  seeds excludes zero and the exact test rejects after Holm) and it points the published difference's way, or not;
- not resolved here (leans their way / leans the other way / no lean): this study's estimate, unresolved;
- no counterpart here / no counterpart there: their arm maps to none of ours, or ours to none of theirs;
- not in this study: their arm maps to an arm this study did not run (or its pair with the baseline was not
  compared); no sign there: their difference is 0; baseline: the row both differences are taken from.

A published difference is never resolved by this report's rule: one score an arm carries no interval over seeds
and no test (with one seed there is none to make). `their_resolved` says so on every row rather than leaving it out.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from analysis.data.arms import iter_arms, short_label, value_text
from analysis.data.setup import model_text, task_text
from analysis.measures.equal_updates import updates_per_job
from analysis.measures.verdict import from_reference

SAMPLES, UPDATES, TOKENS = "equal samples", "equal updates", "equal tokens"
# the tests' held-out pass@1 at each alignment; the unmarked one is at the jobs' ends (what ended them: samples
# unless the caller knows better, `rows(alignments=)`)
METRICS = {"held-out pass@1 (equal updates)": UPDATES, "held-out pass@1 (equal tokens)": TOKENS,
           "held-out pass@1": SAMPLES}
MATCHES = (UPDATES, TOKENS, SAMPLES)
# the settings a file may give, in the order the table shows them, each with what the table calls it
SETTINGS = {"model": "model", "trainer": "trainer", "updates": "updates (optimizer steps)",
            "batch": "prompts x samples a step", "bins": "difficulty bins", "held_out": "held-out measure",
            "seeds": "seeds", "generation": "generation length"}
FIELDS = {  # key -> (required, what it is)
    "name": (True, "the study as the report names it"),
    "source": (True, "url (required), author, date, comment, round"),
    "measure": (True, "what each score is"),
    "alignment": (True, "theirs, in words"),
    "matches": (True, f"the alignment of this study's that is theirs: {', '.join(MATCHES)}"),
    "tokens_measure": (False, "what each arm's `tokens` counts"),
    "seeds": (True, "runs an arm (a whole number)"),
    "baseline": (True, "the arm (`theirs`) their differences are taken from"),
    "arms": (True, "a list of {theirs, ours, score, tokens, note}"),
    "settings": (False, f"their settings: {', '.join(SETTINGS)}"),
}
SOURCE = ("url", "author", "date", "comment", "round")
ARM = ("theirs", "ours", "score", "tokens", "note")

SAME, OPPOSITE, BASELINE = "same sign", "opposite sign", "baseline"
LEANS = {1: "not resolved here (leans their way)", -1: "not resolved here (leans the other way)",
         0: "not resolved here (no lean)"}
NONE_HERE, NONE_THERE, NOT_RUN, FLAT = "no counterpart here", "no counterpart there", "not in this study", \
    "no sign there"
COLUMNS = ("their_arm", "our_arm", "their_score", "their_difference", "their_tokens_ratio", "their_resolved",
           "alignment", "point", "difference", "ci_low", "ci_high", "p_holm", "resolved", "agrees", "note")


class PublishedUnreadable(ValueError):
    """A published-results file that cannot be read (not there, not YAML, a key missing or of the wrong kind); one
    line naming the file and the key."""


@dataclass(frozen=True)
class Arm:
    """One published arm: its name there, its counterpart here (None: none), its score, tokens and a note."""

    theirs: str
    ours: str | None
    score: float
    tokens: float | None
    note: str


@dataclass(frozen=True)
class Published:
    """A published table, checked (`read_published`)."""

    path: str  # as it was named
    name: str
    source: dict[str, str]
    measure: str
    alignment: str
    matches: str
    seeds: int
    baseline: str
    arms: tuple[Arm, ...]
    settings: dict[str, str]
    tokens_measure: str = ""

    def arm(self, theirs: str) -> Arm:
        return next(a for a in self.arms if a.theirs == theirs)


def _text(value: object, where: str, fail) -> str:
    """A plain value as text (a date as ISO); a container or a missing value fails."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (isinstance(value, str)
                                                                               and not value.strip()):
        fail(where, f"must be plain text, got {value!r}")
    return " ".join(str(value).split())  # a folded YAML line as one line


def _number(value: object, where: str, fail, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or (
            positive and value <= 0):
        fail(where, f"must be a {'positive ' if positive else ''}number, got {value!r}")
    return float(value)


def _arms(entries: object, fail) -> list[Arm]:
    """The `arms` list, each entry checked (`fail(key, problem)` raises)."""
    if not isinstance(entries, list) or not entries:
        fail("arms", f"must be a non-empty list ({FIELDS['arms'][1]})")
    arms = []
    for i, entry in enumerate(entries):
        where = f"arms[{i}]"
        if not isinstance(entry, dict):
            fail(where, "must be a mapping of theirs, ours, score, tokens, note")
        for key in entry:
            if key not in ARM:
                fail(f"{where}.{key}", f"unknown key (allowed: {', '.join(ARM)})")
        for key in ("theirs", "score"):
            if entry.get(key) is None:
                fail(f"{where}.{key}", "missing")
        theirs = _text(entry["theirs"], f"{where}.theirs", fail)
        if theirs in {a.theirs for a in arms}:
            fail(f"{where}.theirs", f"{theirs!r} is listed twice")
        ours = entry.get("ours")
        arms.append(Arm(theirs=theirs, ours=None if ours is None else _text(ours, f"{where}.ours", fail),
                        score=_number(entry["score"], f"{where}.score", fail),
                        tokens=None if entry.get("tokens") is None else _number(entry["tokens"], f"{where}.tokens",
                                                                               fail, positive=True),
                        note=_text(entry["note"], f"{where}.note", fail) if entry.get("note") is not None else ""))
    return arms


def read_published(path: str | Path, shown: str | None = None) -> Published:
    """The published table in `path`, checked; `shown`: how errors and the report name it (default: `path`)."""
    name = shown or str(path)

    def fail(key: str, problem: str):
        raise PublishedUnreadable(f"{name}: {key}: {problem}" if key else f"{name}: {problem}")

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        fail("", "no such file (name a published-results YAML file, e.g. analysis/published/marin_8765.yaml)")
    except (OSError, UnicodeDecodeError) as e:
        fail("", f"cannot be read ({e})")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        fail("", f"not YAML ({getattr(e, 'problem', None) or e}"
                 + (f" at line {mark.line + 1})" if mark is not None else ")"))
    if not isinstance(data, dict):
        fail("", "must be a mapping of keys (" + ", ".join(FIELDS) + ")")
    for key in data:
        if key not in FIELDS:
            fail(str(key), f"unknown key (allowed: {', '.join(FIELDS)})")
    for key, (required, what) in FIELDS.items():
        if required and data.get(key) is None:
            fail(key, f"missing ({what})")

    source = data["source"]
    if not isinstance(source, dict):
        fail("source", f"must be a mapping ({FIELDS['source'][1]})")
    for key in source:
        if key not in SOURCE:
            fail(f"source.{key}", f"unknown key (allowed: {', '.join(SOURCE)})")
    if source.get("url") is None:
        fail("source.url", "missing (where the table was published)")
    source_text = {k: _text(v, f"source.{k}", fail) for k, v in source.items() if v is not None}

    matches = _text(data["matches"], "matches", fail)
    if matches not in MATCHES:
        fail("matches", f"{matches!r}: must be one of {', '.join(map(repr, MATCHES))}")
    seeds = data["seeds"]
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        fail("seeds", f"must be a whole number of at least 1, got {seeds!r}")

    arms = _arms(data["arms"], fail)
    baseline = _text(data["baseline"], "baseline", fail)
    base = next((a for a in arms if a.theirs == baseline), None)
    if base is None:
        fail("baseline", f"{baseline!r} is no arm's `theirs` ({', '.join(a.theirs for a in arms)})")
    if base.ours is None:
        fail("baseline", f"its arm {baseline!r} needs `ours`: the arm of this study differences here are taken from")

    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        fail("settings", f"must be a mapping ({FIELDS['settings'][1]})")
    for key in settings:
        if key not in SETTINGS:
            fail(f"settings.{key}", f"unknown key (allowed: {', '.join(SETTINGS)})")
    return Published(path=name, name=_text(data["name"], "name", fail), source=source_text,
                     measure=_text(data["measure"], "measure", fail),
                     alignment=_text(data["alignment"], "alignment", fail), matches=matches, seeds=seeds,
                     baseline=baseline, arms=tuple(arms),
                     settings={k: _text(settings[k], f"settings.{k}", fail) for k in SETTINGS
                               if settings.get(k) is not None},
                     tokens_measure=_text(data["tokens_measure"], "tokens_measure", fail)
                     if data.get("tokens_measure") is not None else "")


def their_resolved(published: Published) -> str:
    """Why a published difference is never resolved by this report's rule (every row says it)."""
    if published.seeds == 1:
        return "no: 1 seed, no test"
    return f"no: {published.seeds} seeds, no interval or test published"


def label_of(ours: str, labels: Sequence[str]) -> str | None:
    """This study's label for a file's `ours`: the label itself, or the one label whose value it is (`grpo` for
    `arm=grpo` where one key tells the arms apart); None where it names none."""
    if ours in labels:
        return ours
    found = [label for label in labels if short_label(label) == ours]
    return found[0] if len(found) == 1 else None


def study_arms(tests: pd.DataFrame) -> list[str]:
    """The arms this study's held-out pass@1 compared, in the family's order."""
    rows = tests[tests["metric"].isin(list(METRICS))] if len(tests) else tests
    return list(dict.fromkeys(str(v) for pair in zip(rows.get("a", []), rows.get("b", [])) for v in pair))


def rows(published: Published, tests: pd.DataFrame, alignments: Mapping[str, tuple[str, str]] | None = None,
         arms: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per published arm and alignment of this study (COLUMNS; see the module): their difference from their
    baseline and their tokens as a ratio of its, this study's difference of the counterpart from the counterpart
    baseline with its 95% interval over seeds and whether it is resolved, and `agrees`. Then this study's arms with
    no published counterpart, at each alignment. `tests`: this study's tests' family (with p_holm); `alignments`:
    each held-out pass@1 metric compared and its (alignment, point), as the verdict names them (default: every
    metric of `METRICS`, no point);
    `arms`: this study's arm labels (default: those its held-out pass@1 compared)."""
    labels = list(arms) if arms is not None else study_arms(tests)
    named = dict(alignments) if alignments is not None else {m: (METRICS[m], "") for m in METRICS}
    base = published.arm(published.baseline)
    our_base = label_of(base.ours, labels) if base.ours else None
    # this study's differences from its baseline, at each alignment it compared them (arm -> [(metric, row)])
    ours: dict[str, list[tuple[str, pd.Series]]] = {}
    if our_base is not None and len(tests):
        # their alignment first, then the others in MATCHES' order
        order = [published.matches, *MATCHES]
        for metric in sorted(named, key=lambda m: order.index(named[m][0]) if named[m][0] in order else len(order)):
            for _, row in from_reference(tests[tests["metric"] == metric], our_base).iterrows():
                ours.setdefault(str(row["arm"]), []).append((metric, row))
    unresolved = their_resolved(published)
    out = []

    def add(arm: Arm | None, our_arm: str, agrees: str, metric: str | None = None, row: pd.Series | None = None):
        their = {} if arm is None else {
            "their_arm": arm.theirs, "their_score": arm.score,
            "their_difference": round(arm.score - base.score, 12),
            "their_tokens_ratio": arm.tokens / base.tokens if arm.tokens and base.tokens else np.nan,
            "their_resolved": unresolved, "note": arm.note}
        here = {} if row is None else {
            "alignment": named[metric][0], "point": named[metric][1], "difference": row["difference"],
            "ci_low": row["ci_low"], "ci_high": row["ci_high"], "p_holm": row["p_holm"],
            "resolved": bool(row["resolved"])}
        out.append({**their, **here, "our_arm": our_arm, "agrees": agrees})

    for arm in published.arms:
        mine = label_of(arm.ours, labels) if arm.ours else None
        if arm is base:
            add(arm, short_label(our_base) if our_base else base.ours, BASELINE if our_base else NOT_RUN)
        elif arm.ours is None:
            add(arm, "", NONE_HERE)
        elif mine is None or our_base is None or mine not in ours:
            add(arm, arm.ours, NOT_RUN)
        else:
            for metric, row in ours[mine]:
                add(arm, short_label(mine), agreement(arm.score - base.score, row), metric, row)
    mapped = {label_of(a.ours, labels) for a in published.arms if a.ours}
    for label in labels:
        if label not in mapped:
            for metric, row in ours.get(label, [(None, None)]):
                add(None, short_label(label), NONE_THERE, metric, row)
    return pd.DataFrame(out, columns=list(COLUMNS))


def agreement(theirs: float, row: pd.Series | Mapping[str, Any]) -> str:
    """`agrees` for a published difference `theirs` and this study's row (`difference`, `resolved`)."""
    way = int(np.sign(round(theirs, 12)))
    if way == 0:
        return FLAT
    diff = row["difference"]
    lean = 0 if pd.isna(diff) else int(np.sign(round(float(diff), 12))) * way  # a float's noise is no lean
    if not row["resolved"]:
        return LEANS[lean]
    return SAME if lean > 0 else OPPOSITE


def counts(table: pd.DataFrame, alignment: str) -> dict[str, int]:
    """At one alignment, of the arms with a counterpart: how many point their way and the other way, each resolved
    or not, and how many lean no way."""
    at = table[(table["alignment"] == alignment) & table["their_arm"].notna()]
    return {"arms": at["their_arm"].nunique(), "same": int(at["agrees"].isin([SAME, LEANS[1]]).sum()), "same_resolved":
            int((at["agrees"] == SAME).sum()), "other": int(at["agrees"].isin([OPPOSITE, LEANS[-1]]).sum()),
            "other_resolved": int((at["agrees"] == OPPOSITE).sum()), "no_lean": int((at["agrees"] == LEANS[0]).sum())}


def _distinct(jobs: pd.DataFrame, key: str) -> list[str]:
    """The distinct values of a config key over the jobs, as the report names them; [] where none has it."""
    if key not in jobs:
        return []
    return [t for t in dict.fromkeys(value_text(v) for v in jobs[key].tolist()) if t not in ("null", "nan")]


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:,.0f}" if low == high else f"{low:,.0f}–{high:,.0f}"


def our_settings(jobs: pd.DataFrame, steps: pd.DataFrame, eval: pd.DataFrame, arm: Sequence[str]) -> dict[str, str]:
    """This study's settings (`SETTINGS`), read from its jobs' configs, steps and eval rows; a setting the data do
    not say is left out."""
    found: dict[str, str] = {}
    if jobs.empty:
        return found
    models = [m for m in dict.fromkeys(model_text(r) for _, r in jobs.iterrows()) if m]
    if models:
        ranks = _distinct(jobs, "model.lora.rank")
        found["model"] = " and ".join(models) + (f" with LoRA r {'/'.join(ranks)}" if ranks else "")
    trainer = [f"{name} {'/'.join(v)}" for name, key in (("advantage", "algo.advantage"), ("KL β", "algo.beta"),
                                                          ("lr", "algo.lr")) if (v := _distinct(jobs, key))]
    found["trainer"] = "grpo-lab GRPO" + (f", {', '.join(trainer)}" if trainer else "")
    per_job = updates_per_job(steps) if len(steps) else pd.Series(dtype=float)
    if len(per_job):
        budget = _distinct(jobs, "max_samples")
        found["updates"] = f"{_span(per_job.tolist())} a job" + (
            f" (each ended by {budget[0]} samples drawn)" if len(budget) == 1 else "")
    prompts, group = _distinct(jobs, "prompts_per_step"), _distinct(jobs, "sampler.group_size")
    if prompts and group:
        found["batch"] = f"{'/'.join(prompts)} x {'/'.join(group)}"
    if "difficulty" in eval and len(eval):
        tasks = [t for t in dict.fromkeys(task_text(r) for _, r in jobs.iterrows()) if t]
        found["bins"] = f"{eval['difficulty'].nunique()}" + (f" ({' and '.join(tasks)})" if tasks else "")
    if "prompt_id" in eval and len(eval):
        n = _distinct(jobs, "eval.n")
        found["held_out"] = (f"pass@1 on {eval['prompt_id'].nunique():,} held-out prompts"
                             + (f" x {'/'.join(n)} samples" if n else "") + ", at each alignment of the rows")
    if "seed" in jobs and arm:
        seeds = [part["seed"].nunique(dropna=False) for _, part in iter_arms(jobs, arm)]
        found["seeds"] = f"{_span(seeds)} an arm"
    if tokens := _distinct(jobs, "rollout.max_new_tokens"):
        found["generation"] = f"{'/'.join(tokens)} new tokens"
    return found


def settings_table(published: Published, here: Mapping[str, str]) -> pd.DataFrame:
    """Their settings beside this study's: setting, theirs, here ("–" where one side does not say)."""
    keys = [k for k in SETTINGS if k in published.settings or k in here]
    return pd.DataFrame({"setting": [SETTINGS[k] for k in keys],
                         "theirs": [published.settings.get(k, "–") for k in keys],
                         "here": [here.get(k, "–") for k in keys]})
