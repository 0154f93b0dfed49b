"""Thompson sampling over difficulty bins: draw more prompts from the bins whose groups have tied least. The
thompson arm of marin-community/marin issue #8765 (Qwen3-0.6B, graded bins, arms differing only in which prompts are
drawn; code: MarinSkyRL skyrl-train/skyrl_train/curriculum.py, the `thompson` kind, `ThompsonInformative`).

A bin is a problem's `difficulty` label. The reference's rule: each bin's reward is its *informative-group rate*,
the fraction of its groups that did not tie (an untied group: rewards not all equal). Each bin keeps decayed counts,
informative groups i and groups n, and after every training step all of them, drawn from or not, decay once:
  i <- decay i + (this step's untied groups of the bin) + reversion_mass / 2,
  n <- decay n + (this step's groups of the bin) + reversion_mass
(reversion_mass: pseudo-groups at rate 1/2 each step, so a starved bin's belief drifts back; 0 by default). A step
draws one Thompson sample per bin from Beta(prior_alpha + i, prior_beta + n - i); the samples, normalised, raised to
epsilon / bins and renormalised, are the bins' weights, and each of the step's prompts is a bin drawn by those
weights and a prompt drawn uniformly within it, redrawn if already taken this step (a probability-matching mixture,
not the single best bin).

Here: `selection=weights` is that rule. The redraw-until-new loop is drawn in one pass: prompt r of bin b has weight
w_b / n_b (n_b: the bin's distinct prompts), and the step's prompts are picked one at a time among those not yet
picked, with probability proportional to that weight (`weighted_picks`: one uniform number a pick), which is the
distribution the reference's rejection loop ends in, without its cap of 1,000 redraws. `selection=best` is the
rule as the issue's text puts it, "take prompts from the best bin": the bins are ranked by their Thompson sample
(ties to the lower bin), and the step's prompts fill from the best bin, uniformly without replacement within it; a
bin with fewer prompts than are still needed gives all of them and the rest come from the next bin down, and so on.
Bins are ordered by their labels, numerically where the labels are numbers; the Thompson samples are drawn in that
order, then one uniform number a pick, all from the sampler's own seeded generator. Prompts are drawn from the pool
directly, not from the run's prompt stream: nothing is taken from it and passed over, so `skipped_prompts` is 0.
Every group drawn trains (ties included: DAPO's filter is another arm, sampler=dynamic); the reference folds every
group of the step into the counts, before any filter. What a tie is: the group's `tie` (reward std <= algo.std_eps),
which for binary rewards is the reference's rewards-not-all-equal. The counts, keyed by bin label, and the generator
are the sampler's state. A step whose prompts outnumber the pool's distinct prompts stops the run, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, use
from grpo_lab.samplers.learnability import floored, weighted_picks

SELECTIONS = ("weights", "best")


@dataclass
class ThompsonBinsSettings(SamplerSettings):
    """The reference's defaults (curriculum.py's CurriculumConfig, which the #8765 arms kept)."""

    prior_alpha: float = 1.0  # Beta prior of a bin's untied-group rate (reference prior_alpha 1.0: flat)
    prior_beta: float = 1.0  # (reference prior_beta 1.0)
    decay: float = 0.95  # how much of every bin's counts survives each step (reference decay 0.95); 1 forgets nothing
    epsilon: float = 0.05  # weight floor: each bin keeps at least epsilon / bins of the mass (reference epsilon 0.05)
    # pseudo-groups a step added to every bin at rate 1/2, so a starved bin is re-probed (reference reversion_mass 0.0;
    # #8765's round-4 Snowball recipe set 2.0)
    reversion_mass: float = 0.0
    selection: str = "weights"  # weights: bins drawn by their floored samples (the reference) | best: best bin first

    def check(self, key: str) -> None:
        for name in ("prior_alpha", "prior_beta"):
            require(getattr(self, name) > 0, f"{key}.{name}", getattr(self, name), "must be > 0 (a Beta parameter)")
        require(0 <= self.decay <= 1, f"{key}.decay", self.decay, "must lie in [0, 1]")
        require(0 <= self.epsilon <= 1, f"{key}.epsilon", self.epsilon, "must lie in [0, 1]")
        require(self.reversion_mass >= 0, f"{key}.reversion_mass", self.reversion_mass, "must be >= 0")
        require(self.selection in SELECTIONS, f"{key}.selection", self.selection,
                f"must be one of {', '.join(map(repr, SELECTIONS))}")


def label_order(labels) -> list[str]:
    """Difficulty labels in order: numbers by value ("2" before "10"), then the others by name."""
    def key(label: str):
        try:
            return (0, float(label), label)
        except ValueError:
            return (1, 0.0, label)
    return sorted(set(labels), key=key)


def bin_update(informative: float, total: float, untied: int, groups: int, decay: float,
               reversion_mass: float) -> tuple[float, float]:
    """One bin's counts after a step with `groups` groups of which `untied` did not tie (the reference's
    BinStats.apply_step; a bin not drawn from has 0 and 0, and still decays)."""
    return (decay * informative + untied + reversion_mass * 0.5, decay * total + groups + reversion_mass)


class ThompsonBinsSampler(Sampler):
    name = "thompson_bins"
    settings_type = ThompsonBinsSettings

    def _bins(self) -> tuple[list[str], dict]:
        """The bins' labels in order and each bin's distinct prompts in pool order (the pool never changes)."""
        if not hasattr(self, "_members"):
            distinct = list({p.prompt_id: p for p in reversed(self.stream.pool)}.values())[::-1]  # first of each id
            labels = label_order(p.difficulty for p in distinct)
            self._members = {label: [p for p in distinct if p.difficulty == label] for label in labels}
        return list(self._members), self._members

    def draw(self, draw_round, prompts: int) -> Draw:
        c = self.settings
        labels, members = self._bins()
        distinct = sum(len(m) for m in members.values())
        if distinct < prompts:
            return Draw([], [], exhausted=(
                f"thompson_bins sampler: prompts_per_step={prompts} is more than the training pool's "
                f"{distinct} distinct prompts; a step draws that many distinct prompts"))
        bins = self.extra_state.setdefault("bins", {})  # label -> [informative, total], decayed every step
        for label in labels:
            bins.setdefault(label, [0.0, 0.0])
        inf, tot = (np.array([bins[label][k] for label in labels], dtype=np.float64) for k in (0, 1))
        sample = self.rng.beta(c.prior_alpha + inf, c.prior_beta + (tot - inf))  # one Thompson sample a bin
        if c.selection == "weights":
            rows = [(label, p) for label in labels for p in members[label]]
            bin_weight = dict(zip(labels, floored(sample, c.epsilon)))
            picks = weighted_picks([bin_weight[label] / len(members[label]) for label, _ in rows], prompts, self.rng)
            chosen = [rows[i][1] for i in picks]
        else:
            chosen = []
            for b in np.argsort(-sample, kind="stable"):
                need = prompts - len(chosen)
                if need == 0:
                    break
                group = members[labels[b]]
                chosen += [group[i] for i in weighted_picks(np.ones(len(group)), min(need, len(group)), self.rng)]
        groups = draw_round(chosen, 0)
        untied = {label: 0 for label in labels}
        drawn = {label: 0 for label in labels}
        for g in groups:
            drawn[g.problem.difficulty] += 1
            untied[g.problem.difficulty] += int(not g.tie)
        for label in labels:
            bins[label] = [float(x) for x in bin_update(*bins[label], untied[label], drawn[label], c.decay,
                                                          c.reversion_mass)]
        return Draw(groups, [[g] for g in use(groups)])
