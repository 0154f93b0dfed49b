"""The records the stages hand each other, in one module that imports nothing of the project: a problem and a task's
pools, a sampled group of completions, what a sampler drew for a step, a batch of rollouts, and what a group's
samples trained with. Each stage makes or reads them; none owns them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

if TYPE_CHECKING:  # annotations only: this module runs without torch
    import torch


@dataclass(frozen=True)
class Problem:
    """One verifiable problem. `prompt_id` is stable across runs so a prompt's history can be followed."""

    prompt_id: str
    prompt: str
    answer: str
    difficulty: str  # level label "1".."5", or a pass-rate bin


@dataclass(frozen=True)
class Task:
    """A finite training pool, a disjoint held-out pool, and how answers are checked.

    answer_kind: "integer" (exact integer match), "latex" (math-verify equivalence) or "graded" (the task's
    `grader` judges the one final answer read: rewards.rules.stated_answer).
    answer_format: "bare" (the whole completion), "number", "boxed", "answer_line" or "last_number"
    (rewards.final_answer).
    """

    name: str
    train: tuple[Problem, ...]
    held_out: tuple[Problem, ...]
    answer_kind: str
    # what each difficulty label is, for the report's figures ("1": "1+1 digits"); {} when the labels say it
    difficulty_labels: dict[str, str] = field(default_factory=dict)
    answer_format: str = "bare"  # where the answer is read in a completion (rewards.ANSWER_FORMATS)
    # answer_kind "graded": the task's own check of the one final answer read, (answer or None, problem) -> right
    # (task=gym: the generator's score_answer); None for the other kinds
    grader: Callable[[str | None, Problem], bool] | None = field(default=None, compare=False, repr=False)
    shots: tuple[tuple[str, str], ...] = ()  # worked examples it gives: chat turns before each question
    source: dict = field(default_factory=dict)  # where its problems come from (task=gym: generator, version, ...)

    def __post_init__(self) -> None:
        if not self.train:
            raise ValueError(f"task {self.name!r} has an empty training pool")
        overlap = {p.prompt_id for p in self.train} & {p.prompt_id for p in self.held_out}
        if overlap:
            raise ValueError(f"task {self.name!r}: {len(overlap)} prompt ids are in both pools, e.g. {min(overlap)!r}")


@dataclass
class Rollout:
    """B prompts x G samples, flattened group-major: sample j of prompt i is row i*G + j. A training batch that
    joins groups of several sizes (DARS's extra answers, knapsack's allocations) has a (B,) tensor of counts as
    `group_size`: prompt row i's samples follow row i-1's, each row prefilled once."""

    prompt_ids: torch.Tensor  # (B, P) left-padded
    prompt_mask: torch.Tensor  # (B, P)
    completion_ids: torch.Tensor  # (N, T) N = B*G, pad after the end
    completion_mask: torch.Tensor  # (N, T) 1 up to and including the end token
    old_logp: torch.Tensor  # (N, T) log-probs the sampler drew each token with
    texts: list[str]  # N decoded completions, end token stripped
    lengths: torch.Tensor  # (N,) tokens generated (end token included)
    truncated: torch.Tensor  # (N,) bool: no end token within max_new_tokens
    group_size: int | torch.Tensor  # G; or (B,) counts, one per prompt (a training batch of unequal groups)


@dataclass
class Group:
    """One sampling round of one prompt: G completions and their scores."""

    problem: Problem
    round: int  # 0 = first draw of this prompt this step; k = k-th redraw after a tie
    samples: Rollout | None  # the G completions (one prompt); None where another rank drew them
    rewards: np.ndarray  # (G,) float32
    correct: np.ndarray  # (G,) bool
    tie: bool  # reward std <= eps: zero advantage for every member
    used: bool = False  # set by the sampler: the group enters the gradient
    # which samples enter the gradient when used (None: all). The unit's baseline still pools every sample:
    # reinforce_ada trains a fixed-size subset of a prompt's answers against the mean of all of them
    train: np.ndarray | None = None  # (G,) bool
    # which samples make the unit's baseline (None: all). PODS trains a max-variance subset against the
    # statistics of that subset only; a sample outside the baseline never trains
    baseline: np.ndarray | None = None  # (G,) bool
    rank: int = 0  # the process that drew it (data parallel): it holds the samples and trains on them
    tokens: int = 0  # tokens generated for this group
    prompt_tokens: int = 0  # its prompt's tokens, prefilled once for the group's samples (0: not recorded, a replay)
    truncated: int = 0  # its samples cut at max_new_tokens (read from `samples` where this rank holds them)
    # a replayed group (sampler=replay): drawn at `source_step`, trained again with the advantages it had then;
    # its samples' old_logp are the log-probs of the policy that sampled them (its behaviour log-probs)
    source_step: int | None = None
    advantages: np.ndarray | None = None  # (G,) float32
    # the sampler's predicted pass rate for this prompt before it was drawn (MoPPS); None where the sampler
    # predicts none
    predicted_rate: float | None = None
    # whether an answer could be read from each sample in the task's answer format (G,) bool: an all-wrong tie
    # with none is a format failure, one with all a capability failure; None where not recorded (a replay)
    answered: np.ndarray | None = None
    # the answer read from each sample (G,) object: str, or None where none was; only where `samples` are held
    # (the rank that drew them), for the completions table
    answers: np.ndarray | None = None

    @property
    def reused(self) -> bool:
        """A replay of a group drawn at an earlier step: trained again, not drawn again."""
        return self.source_step is not None

    @property
    def n_trained(self) -> int:
        """Samples of this group that entered the gradient."""
        if not self.used:
            return 0
        return len(self.rewards) if self.train is None else int(self.train.sum())


class DrawRound(Protocol):
    """(problems, round, size) -> one freshly sampled and scored Group of `size` samples (default: the
    configured group_size) per problem, in order. A problem listed k times gets k groups."""

    def __call__(self, problems: list[Problem], round: int, size: int | None = None) -> list[Group]: ...


@dataclass
class Draw:
    """What a sampler drew for one step."""

    groups: list[Group]  # every group drawn, in draw order (all go to the table)
    units: list[list[Group]]  # what trains: each unit's groups pool into one advantage baseline
    exhausted: str | None = None  # set when the sampler hit its cap: the run must stop, saying this
    skipped: int = 0  # prompts taken from the stream and passed over unsampled (cost no samples; reported)


@dataclass
class Trained:
    """What one group's samples trained with: its unit's index in the step, each sample's advantage (NaN where the
    sample did not enter the update) and, for per-token rules, each sample's mean and max token entropy."""

    unit: int
    advantages: np.ndarray  # (G,) float32
    entropy: np.ndarray | None = None  # (G, 2) float32: mean, max; NaN where not trained

    @property
    def n_informative(self) -> int:
        """Samples whose advantage was nonzero (NaN, a sample that did not train, is not)."""
        return int(np.sum(np.nan_to_num(self.advantages) != 0))
