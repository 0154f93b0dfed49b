"""Advantage rules (`algo.advantage`): what each sample of a training unit learns from the unit's rewards, tied
units included. Each rule is one module here owning its keys, checks, advice and computation
(grpo_lab/advantage/base.py), registered below once; `conf/algo/<name>.yaml` is its preset."""

from __future__ import annotations

from grpo_lab.advantage.base import AdvantageRule
from grpo_lab.advantage.grpo import GrpoRule
from grpo_lab.advantage.ngrpo import NgrpoRule
from grpo_lab.advantage.rl_zvp import RlZvpRule
from grpo_lab.advantage.spo import SpoRule
from grpo_lab.errors import require

RULES: dict[str, type[AdvantageRule]] = {cls.name: cls for cls in (GrpoRule, NgrpoRule, RlZvpRule, SpoRule)}


def rule(name: str) -> type[AdvantageRule]:
    """The rule `algo.advantage` names (one line naming the key where none is)."""
    require(name in RULES, "algo.advantage", name, f"must be one of {', '.join(map(repr, RULES))}")
    return RULES[name]


def check_rules(algo) -> None:
    """The chosen rule exists; every rule's own keys are in range (whatever the rule: a value is checked where
    it is set)."""
    rule(algo.advantage)
    for cls in RULES.values():
        cls.check(algo)


__all__ = ["AdvantageRule", "RULES", "check_rules", "rule"]
