"""pass@k and cons@k against plain combinatorics, curves, and comparisons that refuse unequal budgets."""

import itertools
import random
from collections import Counter
from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest

from analysis.budget import (BudgetMismatch, at_k, at_k_curves, compare_at_k, cons_at_k, default_ks, pass_at_k,
                             per_prompt)


def test_pass_at_k_equals_the_combinatorial_formula():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(comb(n - c, k), comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


def test_pass_at_k_stays_exact_where_the_binomials_overflow_floats():
    n, c, k = 5000, 3, 2000  # C(5000, 2000) has about 1,460 digits
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9)


def test_pass_at_k_is_vectorised_and_refuses_k_outside_1_to_n():
    np.testing.assert_allclose(pass_at_k([4, 4, 4], [0, 1, 4], 2), [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="k must be within 1..n"):
        pass_at_k(4, 1, 5)


def brute_force_cons(answers, correct, k):
    """Majority vote over every k-subset, as the definition says."""
    value = {a: np.mean([c for b, c in zip(answers, correct) if b == a]) for a in set(answers) - {None}}
    total = 0.0
    subsets = list(itertools.combinations(range(len(answers)), k))
    for subset in subsets:
        votes = Counter(answers[i] for i in subset if answers[i] is not None)
        if votes:
            top = max(votes.values())
            winners = [a for a, v in votes.items() if v == top]
            total += sum(value[a] for a in winners) / len(winners)
    return total / len(subsets)


def test_cons_at_k_equals_brute_force_over_all_k_subsets():
    rng = random.Random(0)
    for _ in range(40):
        n = rng.randint(1, 8)
        answers = [rng.choice(["7", "8", "9", "10", None]) for _ in range(n)]
        correct = [a == "7" for a in answers]
        for k in range(1, n + 1):
            assert cons_at_k(answers, correct, k) == pytest.approx(brute_force_cons(answers, correct, k), abs=1e-12)


def test_cons_at_k_missing_answers_never_win_and_ties_split():
    assert cons_at_k([None, None, None], [False] * 3, 2) == 0.0
    assert cons_at_k(["a", "b"], [True, False], 2) == 0.5
    assert cons_at_k(["a", None, None], [True, False, False], 3) == 1.0  # one vote against two abstentions
    with pytest.raises(ValueError, match="k must be within 1..n"):
        cons_at_k(["a"], [True], 2)


def eval_rows(scores_by_prompt, step=0, temperature=1.0, job="0"):
    """Eval rows from {prompt: [answer, ...]}; "A" is the right answer."""
    rows = [{"job": job, "step": step, "prompt_id": p, "difficulty": "1", "sample": i, "answer": a,
             "correct": a == "A", "temperature": temperature}
            for p, answers in scores_by_prompt.items() for i, a in enumerate(answers)]
    return pd.DataFrame(rows)


def random_answers(rng, prompts, n):
    return {f"p{i}": [rng.choice(["A", "A", "B", "C", None]) for _ in range(n)] for i in range(prompts)}


def test_per_prompt_fast_path_equals_the_plain_functions():
    answers = random_answers(random.Random(1), prompts=12, n=8)
    scores = per_prompt(eval_rows(answers), ks=[1, 3, 8]).set_index("prompt_id")
    for prompt, votes in answers.items():
        correct = [a == "A" for a in votes]
        for k in (1, 3, 8):
            assert scores.loc[prompt, f"pass@{k}"] == pytest.approx(pass_at_k(8, sum(correct), k))
            assert scores.loc[prompt, f"cons@{k}"] == pytest.approx(cons_at_k(votes, correct, k))


def test_curves_over_k_with_bootstrap_intervals():
    curves = at_k_curves(eval_rows(random_answers(random.Random(2), prompts=30, n=8)), by=["temperature"], n_boot=200)
    assert default_ks(8) == [1, 2, 4, 8] and sorted(curves["k"].unique()) == [1, 2, 4, 8]
    assert set(curves["difficulty"]) == {"1", "all"}
    assert ((curves["ci_low"] <= curves["mean"]) & (curves["mean"] <= curves["ci_high"])).all()
    passed = curves[(curves["metric"] == "pass@k") & (curves["difficulty"] == "all")]["mean"].to_numpy()
    assert (np.diff(passed) >= 0).all()  # more samples never lower pass@k


def test_comparison_at_equal_budgets_is_paired_over_prompts():
    rng = random.Random(3)
    a = at_k(eval_rows(random_answers(rng, prompts=20, n=8)), k=4)
    b = at_k(eval_rows(random_answers(rng, prompts=20, n=8), step=10), k=4)
    result = compare_at_k(a, b, n_boot=200)
    assert result.prompts == 20
    assert result.difference == pytest.approx(b.mean - a.mean)
    assert result.ci_low <= result.difference <= result.ci_high


def test_comparison_at_mismatched_budgets_is_refused():
    answers = random_answers(random.Random(4), prompts=5, n=8)
    base = at_k(eval_rows(answers), k=4)
    with pytest.raises(BudgetMismatch, match="k=4 vs k=8"):
        compare_at_k(base, at_k(eval_rows(answers), k=8))
    with pytest.raises(BudgetMismatch, match="temperature=1.0 vs 0.7"):
        compare_at_k(base, at_k(eval_rows(answers, temperature=0.7), k=4))
    with pytest.raises(BudgetMismatch, match="metric pass@k vs cons@k"):
        compare_at_k(base, at_k(eval_rows(answers), k=4, metric="cons@k"))
    with pytest.raises(BudgetMismatch, match="k=16 is more than the 8 samples"):
        at_k(eval_rows(answers), k=16)
    mixed = pd.concat([eval_rows(answers), eval_rows(answers, temperature=0.7, job="1")])
    with pytest.raises(BudgetMismatch, match="mix temperature"):
        at_k(mixed, k=4)
