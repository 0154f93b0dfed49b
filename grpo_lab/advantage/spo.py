"""`spo` (Xu et al. 2025, "Single-stream Policy Optimization", arXiv:2509.13232; code: verl-project/verl-recipe
`spo/spo_ray_trainer.py` at 48ea0a797fa2, :530-561): each answer's baseline is its prompt's pass rate as a tracker
predicted it before the answer was drawn, A = r - v, and the step's advantages are then normalised together,
(A - mean) / (Bessel std + 1e-8), over every sample of the batch rather than within a group. No group is needed,
so no group can tie; an answer whose reward its tracker predicted well is the one that teaches little.

The tracker is the sampler's (`sampler=spo`: grpo_lab/samplers/spo.py), which sets each group's `predicted_rate`
before the draw; a sampler that set it for groups of several answers would give them their prompt's one baseline."""

from __future__ import annotations

import numpy as np

from grpo_lab.advantage.base import AdvantageRule

EPS = 1e-8  # the code's, added to the batch's std


def spo_advantages(rewards: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """(r - v - mean) / (Bessel std + 1e-8) over the step's samples (P,); zeros for a step of one sample (no
    spread to scale by: torch's Bessel std of one value is NaN)."""
    raw = np.asarray(rewards, np.float64) - np.asarray(predicted, np.float64)
    if raw.size < 2:
        return np.zeros(raw.shape, np.float32)
    return ((raw - raw.mean()) / (raw.std(ddof=1) + EPS)).astype(np.float32)


class SpoRule(AdvantageRule):
    name = "spo"
    reads_std = False  # the batch's Bessel std, as its code: algo.std does not apply
    predicted = True

    @classmethod
    def step_advantages(cls, rewards: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        return spo_advantages(rewards, predicted)
