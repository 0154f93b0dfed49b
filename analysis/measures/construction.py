"""Quantities an arm's own rule fixes: measured, but not a finding. A tie rule forces an advantage on samples whose
training unit drew no other answer (RL-ZVP's entropy-shaped advantages, NGRPO's virtual right answer, AR3PO's right
answer reused from an earlier step), so they count as informative whatever the policy does; a cap trains only part
of what the sampler draws (PODS G of n, Reinforce-Ada 8 of the rounds it drew for a prompt), so the rest is wasted;
SPO's groups of one answer never tie and its advantages are nonzero for every sample; a group of 16 ties less often
than a group of 8 at any pass rate (p^G + (1−p)^G falls with G). A comparison on such a quantity says what the rule
is, not how the arm trained: it is labelled "by construction" and left out of rankings, of Holm's families and of
the counts of findings.

The tie rules, caps and groups of one are read from the groups table (`analysis.measures.informative`: informative
samples in units whose drawn rewards have no spread, units that trained fewer samples than they drew, groups of one
answer), so a new rule is covered without a list to edit; each such arm's informative samples are also counted
comparably (`informative.comparable_per_job`), by one rule for every arm. Where the table cannot tell (no groups,
no `n_trained`), the rules are read from each arm's config (the analysis never imports the training code: the keys
below are its contract, `grpo_lab/config/schema.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis.data.arms import iter_arms, value_text
from analysis.measures.informative import COMPARABLE_METRIC, counts, drawn_groups, per_job_sums
from analysis.measures.informative import READ as COUNTED

WASTED = "wasted_frac"
TIES = ("tie_frac (first rounds)", "tie_frac (first rounds, equal updates)")


def _one(rows: pd.DataFrame, key: str) -> str | None:
    """The arm's one value of `key` as text, or None where the key is absent or its jobs differ."""
    if key not in rows:
        return None
    values = rows[key].map(value_text).unique()
    return values[0] if len(values) == 1 else None


LESS, MORE = -1, 1  # which way a rule pushes an arm's wasted fraction
READ = (*COUNTED, "round", "tie_kind")  # the groups' columns the rules are read from (and the first-round sizes)
TIE_RULE, CAP, ONE_ANSWER = "tie rule", "cap", "groups of one answer"  # the kinds of rule that fix a share
SINGLE_SHARE = 0.5  # an arm with at least this share of its samples in groups of one answer draws no groups
CAPPED_SHARE = 0.5  # an arm whose training units are capped at least this often, by one count or share, has a cap


def _config_rules(rows: pd.DataFrame) -> list[tuple[str, int, str]]:
    """The rules an arm's config names: (kind, LESS or MORE, the reason) each. `rows`: its jobs."""
    found = []
    if _one(rows, "algo.advantage") == "rl_zvp":
        found.append((TIE_RULE, LESS, "RL-ZVP gives every sample of a tied group an entropy-shaped advantage, so "
                                      "every sample that enters the update is informative by construction"))
    if _one(rows, "algo.advantage") == "spo":
        found.append((ONE_ANSWER, LESS, "SPO's advantage is an answer's reward less its prompt's tracked pass rate, "
                                        "normalised over the batch: nonzero for every sample, so every sample that "
                                        "enters the update is informative by construction (what it wastes instead: "
                                        "answers its tracker predicted, near-zero advantages)"))
    if _one(rows, "sampler.name") == "pods":
        drawn, kept = _one(rows, "sampler.pods.n"), _one(rows, "sampler.group_size")
        if drawn is not None and kept is not None and float(drawn) > 0:
            share = float(kept) / float(drawn)
            found.append((CAP, MORE, f"PODS trains {kept} of the {drawn} samples it draws a prompt, so at least "
                                     f"{1 - share:.0%} of them are wasted by construction (at most "
                                     f"{1000 * share:,.0f} informative per 1,000)"))
        else:
            found.append((CAP, MORE, "PODS trains only part of the samples it draws, so part of them is wasted by "
                                     "construction"))
    return found


def wasted_by_rule(rows: pd.DataFrame) -> list[tuple[int, str]]:
    """Which way an arm's configured rule pushes its wasted fraction, and why: (LESS or MORE, the reason) for each
    rule its config names (none: []). `rows`: its jobs. `fixed_by_rule` reads the rules from the groups too."""
    return [(way, why) for _, way, why in _config_rules(rows)]


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _rule_names(rows: pd.DataFrame, keys: Sequence[str] = ("algo.advantage", "sampler.name")) -> str:
    """The arm's advantage rule and sampler (`keys`) as its config names them ("" where its jobs record neither)."""
    named = [f"{key} {value}" for key in keys if (value := _one(rows, key)) is not None]
    return f" ({', '.join(named)})" if named else ""


def rules_from_groups(drawn: pd.DataFrame, jobs: pd.DataFrame, found: pd.DataFrame | None = None
                      ) -> tuple[list[tuple[str, int, str]], str]:
    """The rules an arm's groups show, whatever its config names: ((kind, LESS or MORE, the reason) each, its
    informative samples per 1,000 drawn both ways in words, `analysis.measures.informative`; "" where it shows no
    rule). `drawn`: the groups it drew (replays left out); `jobs`: its jobs' configs, to name its rule and sampler;
    `found`: `counts(drawn)`, where the caller has it."""
    if drawn.empty or "n_informative" not in drawn:
        return [], ""
    found = counts(drawn) if found is None else found
    per_job = per_job_sums(drawn, found)
    if per_job.empty:
        return [], ""
    rate = {c: float((1000 * per_job[c] / per_job["samples"]).mean())
            for c in ("informative", "informative_forced", "informative_comparable")}
    both = (f"informative per 1,000 drawn, mean over its jobs: {rate['informative']:,.0f} as trained, what its rule "
            f"gave, and {rate['informative_comparable']:,.0f} comparable across arms, from training units whose drawn "
            "answers differ")
    rules = []
    forced = found["informative_forced"].to_numpy() > 0
    if forced.any():
        kinds = drawn.loc[forced, "tie_kind"].astype(str).value_counts() if "tie_kind" in drawn else pd.Series()
        kinds = kinds[kinds.index.isin(("all_correct", "all_wrong"))]
        which = "" if len(kinds) != 1 else f" ({kinds.index[0].replace('_', '-')} ties)"
        rules.append((TIE_RULE, LESS, f"its advantage rule or sampler{_rule_names(jobs)} gives a nonzero advantage to "
                                      f"samples of tied groups{which} whose training unit drew no other answer "
                                      f"({rate['informative_forced']:,.0f} of every 1,000 samples it drew), so they "
                                      "count as informative by construction"))
    capped = found["capped"].to_numpy()
    trained_units = found["unit_trained"].to_numpy() > 0
    if capped.any():
        units = pd.DataFrame({"unit": found["unit"].to_numpy(), "drawn": found["unit_drawn"].to_numpy(),
                              "trained": found["unit_trained"].to_numpy(), "capped": capped})[trained_units]
        units = units[~units.duplicated("unit")]
        cap = units[units["capped"]]
        ratio = cap["trained"] / cap["drawn"]
        one_count = cap["trained"].nunique() == 1
        if len(cap) >= CAPPED_SHARE * len(units) and (one_count or ratio.max() - ratio.min() <= 1e-9):
            mean_drawn = cap["drawn"].mean()
            lo, hi = cap["drawn"].min(), cap["drawn"].max()
            spread = "" if lo == hi else f" on average ({_count(lo)}–{_count(hi)})"
            kept = (f"{_count(cap['trained'].iloc[0])} of the {mean_drawn:,.0f} samples" if one_count
                    else f"{ratio.iloc[0]:.0%} of the samples")
            kept += f" it draws for a training unit{spread if one_count else ''}"
            wasted = 1 - units["trained"].sum() / units["drawn"].sum()
            sampler = _rule_names(jobs, ("sampler.name",))
            rules.append((CAP, MORE, f"its sampler{sampler} trains {kept}, so at least {wasted:.0%} of its samples are "
                                     "wasted by construction"))
            both += " (the samples its cap left out counted as their group's trained ones were)"
    single = drawn["group_size"].to_numpy() == 1
    share = float(drawn["group_size"].to_numpy()[single].sum() / drawn["group_size"].sum())
    if share >= SINGLE_SHARE:
        rules.append((ONE_ANSWER, LESS, f"it draws groups of one answer ({share:.0%} of its samples), which never tie, "
                                        "so every sample that trains is informative by construction, counted either "
                                        "way"))
    return rules, both if rules else ""


def _merged(config: list[tuple[str, int, str]], data: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """One reason a kind of rule: the config's words where it names the rule (RL-ZVP, PODS, SPO), else the data's."""
    found = {kind: (kind, way, why) for kind, way, why in data}
    found |= {kind: (kind, way, why) for kind, way, why in config}
    return list(found.values())


@dataclass(frozen=True)
class Fixed:
    """What each arm's rule fixes: `wasted` (arm label -> the rules that push its wasted fraction as trained: tie
    rules, caps, groups of one answer), each arm's first-round group sizes (`sizes`: arm label -> sorted sizes),
    which make two arms' tie fractions differ by construction, `comparable` (arm label -> why: the arms whose share
    even counted comparably their rule fixes, groups of one answer that never tie) and `counted` (arm label -> its
    informative samples per 1,000 drawn as trained and comparably, in words, for each arm a rule fixes)."""

    wasted: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    comparable: dict[str, str] = field(default_factory=dict)
    counted: dict[str, str] = field(default_factory=dict)

    def _why(self, arm: str, reasons: Sequence[str]) -> str:
        """An arm's reasons, then its informative samples counted both ways (once, however many rules)."""
        numbers = self.counted.get(arm)
        return "; ".join([*reasons, *([numbers] if numbers else [])])

    def reason(self, metric: str, a: str, b: str, difference: float = 0.0) -> str | None:
        """Why the comparison b − a (`difference`) of arms a and b on `metric` is what their rules make it, or None.
        A rule explains a difference only in its own direction (PODS wasting more, RL-ZVP less, the larger group
        tying less): the other way, or where no rule applies, the difference is a finding like any other. On
        `COMPARABLE_METRIC` (`informative.comparable_per_job`) only groups of one answer fix it (they never tie)."""
        metric = str(metric)
        if metric in (WASTED, COMPARABLE_METRIC):
            rules = self.wasted if metric == WASTED else {arm: [(LESS, why)] for arm, why in self.comparable.items()}
            found = [(arm, [why for way, why in rules.get(arm, []) if difference == 0
                            or (difference > 0) == (way * side > 0)]) for arm, side in ((a, -1), (b, 1))]
            return "; ".join(f"{arm}: {self._why(arm, whys)}" for arm, whys in found if whys) or None
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
        """The arms whose informative share as trained their rule fixes, with why: never ranked on it (each reason
        gives its informative samples per 1,000 drawn both ways, as trained and comparably)."""
        return {arm: self._why(arm, [why for _, why in rules]) for arm, rules in self.wasted.items()}

    def unranked_comparable(self) -> dict[str, str]:
        """The arms whose informative share their rule fixes even counted comparably (groups of one answer, which
        never tie), with why: left out of a ranking on `informative.comparable_per_job` too; every other arm ranks
        there."""
        return {arm: self._why(arm, [why]) for arm, why in self.comparable.items()}


def _sizes(sizes: tuple[int, ...]) -> str:
    return " or ".join(map(str, sizes))


def fixed_by_rule(jobs: pd.DataFrame, groups: pd.DataFrame, arm: Sequence[str]) -> Fixed:
    """Each arm's quantities fixed by its rule: the tie rules, caps and groups of one answer its groups show
    (`rules_from_groups`; `groups`: the groups table, replays left out here, with `n_trained` and `unit` where the
    runs record them) and those its jobs' configs name (`jobs`), and the sizes of the first-round groups it drew."""
    config = {label: rules for label, rows in iter_arms(jobs, arm) if (rules := _config_rules(rows))}
    data: dict[str, list[tuple[str, int, str]]] = {}
    counted: dict[str, str] = {}
    sizes = {}
    if not groups.empty:
        # the columns read here, before any row is dropped: a copy of every config column would cost more
        drawn = drawn_groups(groups[[c for c in dict.fromkeys([*arm, *READ]) if c in groups]]).reset_index(drop=True)
        configs = dict(iter_arms(jobs, arm))
        found = counts(drawn)  # once for every arm: each arm's rows are read from it by position
        for label, rows in iter_arms(drawn, arm):
            data[label], counted[label] = rules_from_groups(rows, configs.get(label, jobs.iloc[:0]),
                                                            found.iloc[rows.index])
        first = drawn[drawn["round"].to_numpy() == 0]
        columns = list(dict.fromkeys([*arm, "group_size"]))
        sizes = {label: tuple(sorted(int(s) for s in rows["group_size"].unique()))
                 for label, rows in iter_arms(first[columns], arm)}
    merged = {label: _merged(config.get(label, []), data.get(label, [])) for label in dict.fromkeys([*config, *data])}
    merged = {label: rules for label, rules in merged.items() if rules}
    wasted = {label: [(way, why) for _, way, why in rules] for label, rules in merged.items()}
    comparable = {label: "; ".join(why for kind, _, why in rules if kind == ONE_ANSWER)
                  for label, rules in merged.items() if any(kind == ONE_ANSWER for kind, _, _ in rules)}
    return Fixed(wasted, sizes, comparable, {label: counted[label] for label in merged if counted.get(label)})
