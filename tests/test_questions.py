"""A study's questions (analysis/measures/questions.py): arms that change the same keys against the reference answer
one question; a study whose arms each change their own recipe asks none; the Findings give one bullet a question,
recounted here from the tests table."""

import numpy as np
import pandas as pd

from analysis.measures.questions import questions
from analysis.measures.verdict import Alignment
from analysis.render.markdown import cell
from analysis.sections.findings import Inputs, findings, words

CONFIG = ["seed", "out_dir", "algo.tied_kl", "algo.tied_norm", "sampler.group_size", "prompts_per_step", "algo.lr"]
ARMS = {"grpo": ("keep", "count", 8, 2), "kl": ("mask", "count", 8, 2), "norm": ("keep", "drop", 8, 2),
        "g2": ("keep", "count", 2, 8), "g16": ("keep", "count", 16, 1)}


def jobs(arms=ARMS, seeds=3) -> pd.DataFrame:
    rows = [{"job": f"{arm}-{s}", "arm": arm, "seed": s, "out_dir": f"/runs/{arm}/{s}", "algo.tied_kl": kl,
             "algo.tied_norm": norm, "sampler.group_size": g, "prompts_per_step": p, "algo.lr": 1e-4}
            for arm, (kl, norm, g, p) in arms.items() for s in range(seeds)]
    return pd.DataFrame(rows)


def test_arms_changing_the_same_keys_answer_one_question():
    asked = questions(jobs(), ["arm"], CONFIG, "arm=grpo")
    assert [(q.keys, q.arms) for q in asked] == [
        (("algo.tied_kl",), ("arm=kl",)), (("algo.tied_norm",), ("arm=norm",)),
        (("sampler.group_size", "prompts_per_step"), ("arm=g2", "arm=g16"))]
    g = asked[2]
    assert g.values == {"arm=grpo": "8, 2", "arm=g2": "2, 8", "arm=g16": "16, 1"}
    assert all(q.reference == "arm=grpo" for q in asked)


def test_no_questions_where_arms_are_recipes_or_too_few_or_the_reference_is_unknown():
    recipes = {"grpo": ("keep", "count", 8, 2), "a": ("mask", "drop", 2, 8), "b": ("mask", "count", 16, 8),
               "c": ("keep", "drop", 4, 1), "d": ("mask", "drop", 16, 2), "e": ("keep", "drop", 16, 1)}
    assert questions(jobs(recipes), ["arm"], CONFIG, "arm=grpo") == []  # five distinct key sets: more than four
    assert questions(jobs({k: ARMS[k] for k in ("grpo", "kl")}), ["arm"], CONFIG, "arm=grpo") == []  # two arms
    assert questions(jobs(), ["arm"], CONFIG, "arm=nobody") == []
    four = jobs({"grpo": ("keep", "count", 8, 2), "x": ("mask", "drop", 2, 1), "y": ("keep", "drop", 8, 2)})
    assert questions(four, ["arm"], CONFIG, "arm=grpo", max_keys=4) != []
    assert questions(four, ["arm"], CONFIG, "arm=grpo", max_keys=3) == []  # x changes four keys at once


def test_a_key_that_varies_within_an_arm_tells_nothing():
    frame = jobs()
    frame.loc[frame["arm"] == "kl", "algo.lr"] = [1e-4, 2e-4, 1e-4]  # one arm's jobs disagree on the lr
    asked = questions(frame, ["arm"], CONFIG, "arm=grpo")
    assert ("algo.tied_kl",) in [q.keys for q in asked]


def family(rng) -> pd.DataFrame:
    """A tests table over ARMS at two alignments: kl resolved above grpo at equal samples with fewer updates,
    everything else not resolved."""
    rows = []
    for metric in ("held-out pass@1", "held-out pass@1 (equal updates)"):
        for arm in ("kl", "norm", "g2", "g16"):
            resolved = arm == "kl" and "updates" not in metric
            d = 0.03 if resolved else float(rng.normal(0, 0.005))
            rows.append({"metric": metric, "a": "arm=grpo", "b": f"arm={arm}", "difference": d,
                         "ci_low": d - 0.01 if resolved else d - 0.02, "ci_high": d + 0.01 if resolved else d + 0.02,
                         "p_holm": 0.001 if resolved else 0.9, "seeds_a": 20, "seeds_b": 20,
                         "updates_a": 600.0, "updates_b": 600.0, "samples_a": 9600.0, "samples_b": 9600.0,
                         "tokens_a": 30000.0, "tokens_b": 30000.0})
    # the family also flips a pair (reference as b): the bullet must flip it back
    flipped = rows[1].copy()
    rows[1] = {**flipped, "a": "arm=norm", "b": "arm=grpo", "difference": -flipped["difference"],
               "ci_low": -flipped["ci_high"], "ci_high": -flipped["ci_low"]}
    return pd.DataFrame(rows)


def test_the_findings_give_one_bullet_a_question_that_recounts_from_the_family():
    tests = family(np.random.default_rng(0))
    empty = pd.DataFrame()
    aligned = [Alignment("equal samples", "held-out pass@1", "end of budget", empty, [], 10),
               Alignment("equal updates", "held-out pass@1 (equal updates)", "300 updates", empty, [], 10)]
    asked = questions(jobs(), ["arm"], CONFIG, "arm=grpo")
    text = findings(Inputs(alignments=aligned, tests=tests, arm=("arm",), questions=asked))
    lines = [line for line in text.splitlines() if line.startswith("- **`")]
    assert len(lines) == 3 and words(text) <= 250 and all(words(line) <= 60 for line in lines)
    kl, norm, g = lines
    assert kl == ("- **`algo.tied_kl`**: mask vs keep (grpo), Δpass@1: +0.03 [0.02, 0.04] at equal "
                  "samples; at equal updates: none resolved. Resolved: kl above grpo at equal samples, with more of "
                  "nothing."), kl
    row = tests.iloc[1]  # norm − grpo, flipped back from the family's grpo − norm
    assert "norm − grpo" not in norm and f"{cell(-row['difference'], 3)} [{cell(-row['ci_high'], 3)}, " \
        f"{cell(-row['ci_low'], 3)}] at equal samples" in norm, norm
    assert all(line.endswith("; not resolved at equal samples or equal updates.") for line in (norm, g))
    assert "g2 " in g and "g16 " in g
    assert "**Equal samples**" not in text  # the questions replace the per-alignment bullets
