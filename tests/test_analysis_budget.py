"""pass@k and cons@k against plain combinatorics, curves, and comparisons that refuse unequal budgets."""

import itertools
import random
from collections import Counter
from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest
from scipy.special import betaln

from analysis.data.checkpoints import attach_samples, checkpoint_labels
from analysis.measures.at_k import at_k_curves
from analysis.measures.comparisons import at_k, checkpoint_comparisons, compare_at_k
from analysis.stats.at_k import BudgetMismatch, cons_at_k, default_ks, pass_at_k, per_prompt
from analysis.stats.intervals import bootstrap_mean_ci


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
             "correct": a == "A", "eval.temperature": temperature}
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
    curves = at_k_curves(eval_rows(random_answers(random.Random(2), prompts=30, n=8)), by=["eval.temperature"],
                         n_boot=200)
    assert default_ks(8) == [1, 2, 4, 8] and sorted(curves["k"].unique()) == [1, 2, 4, 8]
    assert set(curves["difficulty"]) == {"1", "all"}
    assert set(curves["checkpoint"]) == {"base"} and set(curves["steps"]) == {"0"}  # step 0 only: the base model
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
    with pytest.raises(BudgetMismatch, match="mix eval.temperature"):
        at_k(mixed, k=4)


def sweep_eval(steps_by_job, prompts=12, n=8, seed=5, per_step=None):
    """Eval rows of several jobs, {job: (arm, [steps])}, every prompt at every step scored afresh;
    `per_step` {job: samples drawn a step} fills samples_total; each job's seed is its arm's position."""
    rng = random.Random(seed)
    frames = []
    seen: dict[str, int] = {}
    for job, (arm, steps) in steps_by_job.items():
        seen[arm] = seen.get(arm, -1) + 1
        for step in steps:
            frame = eval_rows(random_answers(rng, prompts, n), step=step, job=job).assign(sampler=arm, seed=seen[arm])
            if per_step is not None:
                frame["samples_total"] = step * per_step[job]
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def labels_of(rows):
    return rows.assign(checkpoint=checkpoint_labels(rows)).groupby(["job", "step"])["checkpoint"].first().to_dict()


def test_checkpoints_align_by_samples_drawn_never_by_step():
    steps = {"0": ("fixed", [0, 50, 100]), "2": ("resample", [0, 44, 80]), "9": ("none", [0])}
    rows = sweep_eval(steps, prompts=1, per_step={"0": 128, "2": 150, "9": 128})
    assert labels_of(rows) == {("0", 0): "base", ("0", 50): "6400 samples", ("0", 100): "final", ("2", 0): "base",
                               ("2", 44): "6600 samples", ("2", 80): "final", ("9", 0): "base"}  # no final: untrained
    # evaluated on crossing multiples of eval.every_samples: the same label at unequal steps
    assert labels_of(rows.assign(**{"eval.every_samples": 6400}))[("2", 44)] == "6400 samples"
    # samples unknown (no column, no groups table): the label says it is a step
    assert labels_of(rows.drop(columns="samples_total"))[("2", 44)] == "step 44"


def test_samples_drawn_come_from_the_groups_table_when_eval_rows_lack_them():
    rows = sweep_eval({"0": ("fixed", [0, 2, 3])}, prompts=1)
    groups = pd.DataFrame({"job": "0", "step": [1, 1, 2, 3, 3], "samples_total": [8, 16, 24, 32, 40]})
    assert attach_samples(rows, groups).groupby("step")["samples_total"].first().to_dict() == {0: 0, 2: 24, 3: 40}


def test_curves_pool_each_jobs_final_step_and_keep_only_complete_intermediate_checkpoints():
    rows = sweep_eval({"0": ("fixed", [0, 50, 100]), "1": ("fixed", [0, 50, 100]),
                       "2": ("resample", [0, 40, 50, 80]), "3": ("resample", [0, 50, 83])},
                      per_step={"0": 128, "1": 128, "2": 128, "3": 128})
    curves = at_k_curves(rows, by=["sampler"], ks=[1, 8], n_boot=50)
    shown = curves.drop_duplicates(["sampler", "checkpoint"]).set_index(["sampler", "checkpoint"])["steps"]
    # 5120 samples (step 40) is job 2's alone, so the arm has no such point; final pools steps 80 and 83
    assert shown.to_dict() == {("fixed", "base"): "0, 0", ("fixed", "6400 samples"): "50, 50",
                               ("fixed", "final"): "100, 100", ("resample", "base"): "0, 0",
                               ("resample", "6400 samples"): "50, 50", ("resample", "final"): "80, 83"}
    final = curves[(curves["sampler"] == "resample") & (curves["checkpoint"] == "final")
                   & (curves["difficulty"] == "all") & (curves["metric"] == "pass@k") & (curves["k"] == 8)]
    at_ends = rows[((rows["job"] == "2") & (rows["step"] == 80)) | ((rows["job"] == "3") & (rows["step"] == 83))]
    assert final["prompts"].item() == 12 and final["jobs"].item() == 2  # a prompt of both jobs is one cluster
    assert final["samples"].item() == pytest.approx(128 * (80 + 83) / 2)
    assert final["mean"].item() == pytest.approx(per_prompt(at_ends, [8])["pass@8"].mean())


def test_final_checkpoint_comparison_aligns_jobs_with_different_last_steps():
    rows = sweep_eval({"0": ("fixed", [0, 50, 100]), "1": ("fixed", [0, 50, 100]),
                       "2": ("resample", [0, 50, 80]), "3": ("resample", [0, 50, 83])},
                      per_step={"0": 128, "1": 128, "2": 128, "3": 128})
    rows = rows.assign(updates=rows["step"])  # every step took its update
    table, per_seed = checkpoint_comparisons(rows, ["sampler"], [("pass@k", 4), ("cons@k", 8)], n_boot=200)
    assert table["refused"].isna().all()

    def mean_over_prompts(selected):  # each prompt's score averaged over the arm's jobs, then over prompts
        return per_prompt(selected, [4]).groupby("prompt_id")["pass@4"].mean().mean()

    pass4 = table[table["metric"] == "pass@k"].set_index("checkpoint")
    # jobs that end at different updates are compared at equal updates too, at the last count every job has (50)
    assert list(pass4.index) == ["base", "final", "6400 samples", "50 updates", "final vs base", "final vs base"]
    assert list(pass4["alignment"]) == ["samples"] * 3 + ["updates"] + ["samples"] * 2
    at_50 = pass4.loc["50 updates"]
    assert (at_50["steps_a"], at_50["steps_b"]) == ("50, 50", "50, 50") and at_50["samples_a"] == at_50["samples_b"]
    assert at_50["updates_a"] == at_50["updates_b"] == 50
    assert pass4.loc["final", "updates_a"] == 100 and pass4.loc["final", "updates_b"] == pytest.approx(81.5)
    assert pass4.loc["final", "a_had_more"] == "updates, samples"  # 128 samples a step: 100 steps against 81.5
    assert at_50["mean_b"] - at_50["mean_a"] == pytest.approx(at_50["difference"])
    assert at_50["mean_a"] == pytest.approx(
        mean_over_prompts(rows[(rows["step"] == 50) & rows["job"].isin(["0", "1"])]))
    final = pass4.loc["final"]
    assert (final["a"], final["b"]) == ("sampler=fixed @ final", "sampler=resample @ final")
    assert (final["steps_a"], final["steps_b"]) == ("100, 100", "80, 83")
    assert final["paired"] and final["seeds_a"] == final["seeds_b"] == 2  # seeds 0 and 1 in both arms

    fixed_end = rows[rows["step"] == 100]
    resample_end = rows[((rows["job"] == "2") & (rows["step"] == 80)) | ((rows["job"] == "3") & (rows["step"] == 83))]
    assert final["prompts"] == 12
    assert final["mean_a"] == pytest.approx(mean_over_prompts(fixed_end))
    assert final["mean_b"] == pytest.approx(mean_over_prompts(resample_end))
    assert final["difference"] == pytest.approx(final["mean_b"] - final["mean_a"])
    assert final["ci_low"] <= final["difference"] <= final["ci_high"]
    assert final["p_value"] in (0.5, 1.0)  # two paired seeds: 4 sign patterns, the observed one and its mirror
    seeds = per_seed[(per_seed["checkpoint"] == "final") & (per_seed["metric"] == "pass@k")]
    assert seeds["difference"].mean() == pytest.approx(final["difference"])
    gain = table[(table["checkpoint"] == "final vs base") & (table["b"] == "sampler=resample @ final")
                 & (table["metric"] == "pass@k")].iloc[0]
    assert gain["mean_a"] == pytest.approx(mean_over_prompts(rows[(rows["step"] == 0) & rows["job"].isin(["2", "3"])]))
    assert gain["mean_b"] == pytest.approx(final["mean_b"])


def test_equal_steps_are_not_equal_updates_where_a_step_skipped_its_update():
    """A job that skipped one update before step 50 has 49 updates there: step 50 is no equal-updates point, and
    the comparisons say so by making none (rather than comparing 50 updates with 49)."""
    rows = sweep_eval({"0": ("fixed", [0, 50, 100]), "1": ("fixed", [0, 50, 100]),
                       "2": ("resample", [0, 50, 80]), "3": ("resample", [0, 50, 83])},
                      per_step={"0": 128, "1": 128, "2": 128, "3": 128})
    skipped = (rows["job"] == "3") & (rows["step"] > 10)
    rows = rows.assign(updates=rows["step"] - skipped.astype(int))
    table, _ = checkpoint_comparisons(rows, ["sampler"], [("pass@k", 4)], n_boot=50)
    assert "updates" not in set(table["alignment"])


def test_checkpoint_comparisons_still_refuse_unequal_budgets():
    rows = sweep_eval({"0": ("fixed", [0, 100]), "1": ("resample", [0, 80])})
    rows.loc[rows["job"] == "1", "eval.temperature"] = 0.7
    table, _ = checkpoint_comparisons(rows, ["sampler"], [("pass@k", 4), ("pass@k", 16)], n_boot=50)
    across = table[~table["checkpoint"].eq("final vs base")]
    assert across[across["k"] == 4]["refused"].str.contains("temperature=1.0 vs 0.7").all()
    assert table[table["k"] == 16]["refused"].str.contains("k=16 is more than the 8 samples").all()
    within = table[table["checkpoint"].eq("final vs base") & (table["k"] == 4)]
    assert within["refused"].isna().all() and within["prompts"].eq(12).all()  # one arm, one temperature


def population(levels, prompts, rng):
    """Prompts drawn from synthetic.prompt_pool's population (a level uniformly at random, then p ~ Beta
    with concentration 4 around the level's mean), and the population's pass@k, exactly:
    E[1 - (1-p)^k] with E[(1-p)^k] = B(a, b + k) / B(a, b)."""
    mean = 1 - (np.arange(levels) + 0.5) / levels
    a, b = 4 * mean, 4 * (1 - mean)
    level = rng.integers(0, levels, prompts)
    p = rng.beta(a[level], b[level])  # (prompts,)
    return p, lambda k: float(np.mean(1 - np.exp(betaln(a, b + k) - betaln(a, b))))


def test_pass_at_k_intervals_cover_the_truth_and_match_a_prompt_clustered_bootstrap():
    """Several jobs evaluating one model on the same prompts (the base checkpoint of a sweep): the
    intervals must cover the population pass@k near 95% and be as wide as the prompt-clustered
    CLT interval; resampling (job, prompt) pairs as if independent would cover far less."""
    trials, jobs, n = 100, 3, 8
    covered = {1: 0, 4: 0}
    naive_covered = 0
    width_ratio = []
    for trial in range(trials):
        rng = np.random.default_rng(trial)
        p, truth = population(4, 48, rng)
        ids = np.repeat([f"q{i}" for i in range(len(p))], n)
        rows = pd.concat([pd.DataFrame({  # one model, evaluated by each job with its own samples
            "job": str(j), "step": 0, "prompt_id": ids, "difficulty": "1", "answer": np.where(c.ravel(), "A", "B"),
            "correct": c.ravel(), "sampler": "fixed"})
            for j, c in enumerate(rng.random((jobs, len(p), n)) < p[:, None])],
            ignore_index=True)
        curves = at_k_curves(rows, ["sampler"], ks=[1, 4], n_boot=300, seed=trial)
        pooled = curves[(curves["difficulty"] == "all") & (curves["metric"] == "pass@k")].set_index("k")
        for k in covered:
            covered[k] += pooled.loc[k, "ci_low"] <= truth(k) <= pooled.loc[k, "ci_high"]
        scores = per_prompt(rows, [1])
        by_prompt = scores.groupby("prompt_id")["pass@1"].mean().to_numpy()  # (prompts,) jobs averaged
        clt = 2 * 1.96 * by_prompt.std(ddof=1) / np.sqrt(len(by_prompt))  # the prompt-clustered normal interval
        width_ratio.append((pooled.loc[1, "ci_high"] - pooled.loc[1, "ci_low"]) / clt)
        low, high = bootstrap_mean_ci(scores["pass@1"].to_numpy(), 300, seed=trial)  # (job, prompt) pairs as units
        naive_covered += low[0] <= truth(1) <= high[0]
    for k, hits in covered.items():
        assert 0.88 <= hits / trials <= 0.995, (k, hits / trials)
    assert 0.9 <= np.median(width_ratio) <= 1.1
    assert naive_covered / trials < 0.85  # the old bootstrap's intervals are too narrow
