"""The questions a study asks: where each arm changes a few config keys against one reference arm (experiment=
ties_in_loss: the KL on tied units, the denominator, the all-tied batch, the group size), arms that change the same
keys answer one question. The Findings then give one bullet a question, each arm against the reference at every
alignment, instead of one bullet an alignment (`sections.findings`).

A key tells arms apart where it holds one value in every job of an arm and in the reference's, and the values
differ; keys that vary within an arm (the seed, the run's folder) tell nothing. A study asks questions where every
other arm changes at most MAX_KEYS keys and the arms form 2 to MAX_QUESTIONS distinct questions; a study of arms that
each change their own set of keys (tie_learning's papers' recipes) asks none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.data.arms import iter_arms, value_text
from analysis.data.config import ALIASES

MAX_QUESTIONS = 4  # one bullet each on the first screen
MAX_KEYS = 3  # more keys changed at once is a recipe, not a question


@dataclass(frozen=True)
class Question:
    keys: tuple[str, ...]  # the config keys its arms change, in the config's order, top-level keys last
    arms: tuple[str, ...]  # the arms that change exactly these keys, in the study's order
    values: dict[str, str]  # arm -> its values of `keys` as text ("mask"; "2, 8"), the reference's included
    reference: str


def questions(jobs: pd.DataFrame, arm: Sequence[str], config: Sequence[str], reference: str | None,
              max_questions: int = MAX_QUESTIONS, max_keys: int = MAX_KEYS) -> list[Question]:
    """The study's questions against `reference` (an arm label as the tests name it), or [] where it asks none.
    `jobs`: one row per job with the arm keys and the `config` columns."""
    if reference is None or not arm or jobs.empty:
        return []
    own = [c for c in config if c not in arm and not set(ALIASES.get(c, (c,))) - {c}]  # aliases repeat a key
    settled: dict[str, dict[str, str]] = {}  # arm -> key -> value, the keys that hold one value in all its jobs
    for label, rows in iter_arms(jobs, list(arm)):
        text = rows[own].map(value_text)
        settled[label] = {c: text[c].iloc[0] for c in text.columns if text[c].nunique(dropna=False) == 1}
    if reference not in settled or len(settled) < 3:
        return []
    base = settled[reference]
    changed: dict[tuple[str, ...], list[str]] = {}
    for label, values in settled.items():
        if label == reference:
            continue
        keys = tuple(sorted((k for k in values if k in base and values[k] != base[k]),
                            key=lambda k: "." not in k))  # a block's key first: prompts_per_step follows G
        if not keys or len(keys) > max_keys:
            return []
        changed.setdefault(keys, []).append(label)
    if not 2 <= len(changed) <= max_questions:
        return []
    return [Question(keys=keys, arms=tuple(arms), reference=reference,
                     values={a: ", ".join(settled[a][k] for k in keys) for a in (reference, *arms)})
            for keys, arms in changed.items()]
