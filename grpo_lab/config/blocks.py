"""The blocks a registry completes: `sampler`, `rollout`, `algo` and `task` hold the keys every member reads (a
dataclass written out in schema.py, each key with its comment), then one block per member with keys of its own
(its `settings_type`), under the member's name: `sampler.pods.*`, `rollout.vllm.*`, `task.gym.*`, `algo.<rule>.*`.
A member's keys are therefore its own module's, and the schema never names a member."""

from __future__ import annotations

from dataclasses import field, make_dataclass
from typing import Any


def with_members(name: str, shared: type, members: dict[str, Any], module: str) -> type:
    """The dataclass `name`: `shared`'s keys, then a block for each of `members` (a registry: name -> class) whose
    class has a `settings_type`. `module` is where the result is bound by `name`: sweep launchers pickle configs,
    and a pickled class is found again by its module and name."""
    made = make_dataclass(name, [(member, cls.settings_type, field(default_factory=cls.settings_type))
                                 for member, cls in members.items() if getattr(cls, "settings_type", None)],
                          bases=(shared,))
    made.__module__ = module
    made.__doc__ = shared.__doc__
    return made
