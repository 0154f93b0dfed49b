"""Quantities an arm's own rule fixes: measured, but not a finding. RL-ZVP gives every sample of a tied group an
advantage, so its informative share is 1 whatever the policy does; PODS trains G of the n samples it draws, so at
least 1 − G/n of them are wasted; SPO's advantages are nonzero for every sample and its groups of one never tie; a
group of 16 ties less often than a group of 8 at any pass rate
(p^G + (1−p)^G falls with G). A comparison on such a quantity says what the rule is, not how the arm trained:
it is labelled "by construction" and left out of rankings, of Holm's families and of the counts of findings.

The rules are read from each arm's config (the analysis never imports the training code: the keys below are its
contract, `grpo_lab/config.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis.data.arms import iter_arms, value_text

WASTED = "wasted_frac"
TIES = ("tie_frac (first rounds)", "tie_frac (first rounds, equal steps)")


def _one(rows: pd.DataFrame, key: str) -> str | None:
    """The arm's one value of `key` as text, or None where the key is absent or its jobs differ."""
    if key not in rows:
        return None
    values = rows[key].map(value_text).unique()
    return values[0] if len(values) == 1 else None


LESS, MORE = -1, 1  # which way a rule pushes an arm's wasted fraction


def wasted_by_rule(rows: pd.DataFrame) -> list[tuple[int, str]]:
    """Which way an arm's rule pushes its wasted fraction, and why: (LESS or MORE, the reason) for each rule it
    runs (none: []). `rows`: its jobs."""
    found = []
    if _one(rows, "algo.advantage") == "rl_zvp":
        found.append((LESS, "RL-ZVP gives every sample of a tied group an entropy-shaped advantage, so every sample "
                            "that enters the update is informative by construction"))
    if _one(rows, "algo.advantage") == "spo":
        found.append((LESS, "SPO's advantage is an answer's reward less its prompt's tracked pass rate, normalised "
                            "over the batch: nonzero for every sample, so every sample that enters the update is "
                            "informative by construction (what it wastes instead: answers its tracker predicted, "
                            "near-zero advantages)"))
    if _one(rows, "sampler.name") == "pods":
        drawn, kept = _one(rows, "sampler.pods.n"), _one(rows, "sampler.group_size")
        if drawn is not None and kept is not None and float(drawn) > 0:
            share = float(kept) / float(drawn)
            found.append((MORE, f"PODS trains {kept} of the {drawn} samples it draws a prompt, so at least "
                                f"{1 - share:.0%} of them are wasted by construction (at most {1000 * share:,.0f} "
                                "informative per 1,000)"))
        else:
            found.append((MORE, "PODS trains only part of the samples it draws, so part of them is wasted by "
                                "construction"))
    return found


@dataclass(frozen=True)
class Fixed:
    """What each arm's rule fixes: `wasted` (arm label -> the rules that push its wasted fraction, `wasted_by_rule`)
    and each arm's first-round group sizes (`sizes`: arm label -> sorted sizes), which make two arms' tie fractions
    differ by construction."""

    wasted: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def reason(self, metric: str, a: str, b: str, difference: float = 0.0) -> str | None:
        """Why the comparison b − a (`difference`) of arms a and b on `metric` is what their rules make it, or None.
        A rule explains a difference only in its own direction (PODS wasting more, RL-ZVP less, the larger group
        tying less): the other way, or where no rule applies, the difference is a finding like any other."""
        metric = str(metric)
        if metric == WASTED:
            found = [f"{arm}: {why}" for arm, side in ((a, -1), (b, 1)) for way, why in self.wasted.get(arm, [])
                     if difference == 0 or (difference > 0) == (way * side > 0)]
            return "; ".join(found) or None
        alone = [arm for arm in (a, b) if 1 in self.sizes.get(arm, ())]
        if metric in TIES and alone:  # SPO: one answer a prompt ties with nothing
            return (f"{' and '.join(alone)} drew groups of one answer, which never tie by construction: a tie "
                    "needs two answers")
        if metric in TIES and a in self.sizes and b in self.sizes and self.sizes[a] != self.sizes[b]:
            larger_ties_less = (difference > 0) == (max(self.sizes[a]) > max(self.sizes[b]))
            if difference == 0 or larger_ties_less:
                return (f"first-round groups of {_sizes(self.sizes[a])} ({a}) against {_sizes(self.sizes[b])} ({b}): "
                        "a larger group ties less by construction (p^G + (1−p)^G falls with G)")
        return None

    def label(self, tests: pd.DataFrame) -> pd.DataFrame:
        """`tests` with `by_construction`: each row's reason, or null."""
        reasons = [self.reason(m, str(a), str(b), float(d) if pd.notna(d) else 0.0)
                   for m, a, b, d in zip(tests["metric"], tests["a"], tests["b"], tests["difference"])]
        return tests.assign(by_construction=pd.Series(reasons, index=tests.index, dtype=object))

    def unranked(self) -> dict[str, str]:
        """The arms whose informative share their rule fixes, with why: never ranked on it."""
        return {arm: "; ".join(why for _, why in rules) for arm, rules in self.wasted.items()}


def _sizes(sizes: tuple[int, ...]) -> str:
    return " or ".join(map(str, sizes))


def fixed_by_rule(jobs: pd.DataFrame, groups: pd.DataFrame, arm: Sequence[str]) -> Fixed:
    """Each arm's quantities fixed by its rule: from its jobs' configs (`jobs`) and the sizes of the first-round
    groups it drew (`groups`, rows of the drawn groups)."""
    wasted = {label: rules for label, rows in iter_arms(jobs, arm) if (rules := wasted_by_rule(rows))}
    sizes = {}
    if not groups.empty:
        first = groups[groups["round"].to_numpy() == 0]
        columns = list(dict.fromkeys([*arm, "group_size"]))
        sizes = {label: tuple(sorted(int(s) for s in rows["group_size"].unique()))
                 for label, rows in iter_arms(first[columns], arm)}
    return Fixed(wasted, sizes)
