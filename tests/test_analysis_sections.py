"""Tie persistence, group size and coverage sections against truths computed another way: plain-loop
recounts of the same tables, and synthetic data of known pass rates."""

from itertools import combinations
from math import comb

import numpy as np
import pandas as pd
import pytest

from analysis.data.load import load
from analysis.measures.coverage import coverage, crossing_bounds, crossing_k
from analysis.measures.group_size import best_sizes, expected_by_size, observed_vs_predicted, prompt_pass_rates
from analysis.measures.persistence import persistence
from analysis.sections import coverage as coverage_section
from analysis.sections import group_size as group_size_section
from analysis.sections import persistence as persistence_section
from analysis.sections.section import Context
from analysis.stats.binomial import tie_probability
from fixtures.synthetic import eval_table, job_config, prompt_pool, simulate_groups, write_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Fixed and resample_on_tie jobs (G = 4 and 8) on 160 prompts of known pass rate, with eval rows."""
    root = tmp_path_factory.mktemp("sweep")
    prompts = prompt_pool(per_level=32, seed=5)
    configs = [job_config("fixed", 8, seed=0, max_steps=60, prompts_per_step=16),
               job_config("fixed", 4, seed=1, max_steps=60, prompts_per_step=16),
               job_config("resample_on_tie", 8, seed=2, max_steps=60, prompts_per_step=16)]
    write_sweep(root, configs, prompts, eval_prompts=prompts.iloc[::4], eval_n=16)
    return load(root), prompts.set_index("prompt_id")


def recount_persistence(groups: pd.DataFrame) -> dict:
    """The same statistic with plain Python: visits pooled per (job, prompt, step), then consecutive pairs."""
    visits: dict = {}
    for row in groups.itertuples(index=False):
        key = (str(row.job), str(row.prompt_id))
        step = visits.setdefault(key, {}).setdefault(int(row.step), [0, 0, str(row.sampler), str(row.difficulty)])
        step[0] += int(row.group_size)
        step[1] += int(row.n_correct)
    counts: dict = {}
    for by_step in visits.values():
        steps = sorted(by_step)
        for a, b in zip(steps, steps[1:]):
            n, c, sampler, level = by_step[a]
            kind = "all_correct" if c == n else "all_wrong" if c == 0 else "mixed"
            n2, c2, _, _ = by_step[b]
            tied = c2 in (0, n2)
            for lv in (level, "all"):
                total, again = counts.get((sampler, lv, kind), (0, 0))
                counts[(sampler, lv, kind)] = (total + 1, again + tied)
    return counts


def test_persistence_matches_a_plain_recount(sweep):
    tables, _ = sweep
    table = persistence(tables.groups, by=["sampler"], n_boot=200)
    truth = recount_persistence(tables.groups)
    assert len(table) == len(truth)
    for row in table.itertuples(index=False):
        pairs, again = truth[(row.sampler, row.difficulty, row.kind)]
        assert row.pairs == pairs
        assert row.tied_again_frac == pytest.approx(again / pairs)
        assert row.mixed_frac == pytest.approx(1 - again / pairs)
        assert row.ci_low <= row.tied_again_frac <= row.ci_high


def test_persistence_agrees_with_the_known_pass_rates(tmp_path):
    """Visits are independent given p: P(tied next | all wrong now) = E[(1-p)^G P_tie(p)] / E[(1-p)^G]."""
    prompts = prompt_pool(per_level=40, seed=7)
    cfg = job_config("fixed", 4, seed=3, max_steps=400, prompts_per_step=50)
    groups = simulate_groups(prompts, cfg, run_id="r").to_pandas().assign(job="0", sampler="fixed")
    table = persistence(groups, by=["sampler"]).set_index(["difficulty", "kind"])
    p = prompts.set_index("prompt_id")["p"]
    for level in ("2", "4"):
        q = p[prompts.set_index("prompt_id")["difficulty"] == level].to_numpy()
        for kind, now in (("all_wrong", (1 - q) ** 4), ("all_correct", q**4)):
            expected = (now * tie_probability(q, 4)).sum() / now.sum()
            row = table.loc[(level, kind)]
            assert row.ci_low <= expected <= row.ci_high, (level, kind, expected, row.tied_again_frac)
    assert "## Tie persistence" in persistence_section.describe(table.reset_index(), ["sampler"])


def test_expected_by_size_matches_a_loop_and_a_simulation():
    rates = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(6)], "difficulty": ["a"] * 3 + ["b"] * 3,
                          "p": [0.0, 0.1, 0.5, 0.9, 1.0, 0.3]})
    table = expected_by_size(rates, sizes=[2, 3, 8, 64]).set_index(["difficulty", "group_size"])
    for level, part in rates.assign(all="all").groupby("difficulty"):
        for g in (2, 3, 8, 64):
            informative = sum(1 - p**g - (1 - p) ** g for p in part["p"]) / len(part)
            assert table.loc[(level, g), "informative_frac"] == pytest.approx(informative)
            assert table.loc[(level, g), "samples_per_informative_group"] == pytest.approx(g / informative)
    # a simulation of groups at these pass rates lands inside a 5-sigma band of the expectation
    rng = np.random.default_rng(0)
    p = rates["p"].to_numpy()
    n_correct = rng.binomial(8, np.repeat(p, 20000))
    observed = ((n_correct > 0) & (n_correct < 8)).mean()
    expected = table.loc[("all", 8), "informative_frac"]
    assert abs(observed - expected) < 5 * np.sqrt(expected * (1 - expected) / n_correct.size)


def test_best_sizes():
    rates = pd.DataFrame({"prompt_id": ["x", "y"], "difficulty": ["a", "a"], "p": [0.05, 0.5]})
    best = best_sizes(rates, sizes=range(2, 65), share=0.9).set_index("difficulty")
    frac = expected_by_size(rates).query("difficulty == 'a'").set_index("group_size")["informative_frac"]
    g = best.loc["a", "g_at_share"]
    assert frac[g] >= 0.9 * frac[64] > frac[g - 1]  # the smallest such G, by brute force
    assert best.loc["a", "best_for_groups"] == 2  # no overhead: one more group always beats a bigger one


def test_pass_rates_and_observed_vs_predicted(sweep):
    tables, prompts = sweep
    rates = prompt_pass_rates(tables.groups, tables.eval).set_index("prompt_id")
    base = tables.eval[tables.eval["step"] == 0]
    recount = base.groupby(base["prompt_id"].astype(str))["correct"].mean()
    pd.testing.assert_series_equal(rates["p"].sort_index(), recount.sort_index(), check_names=False)
    fixed = tables.groups[tables.groups["sampler"] == "fixed"]
    observed = observed_vs_predicted(fixed)
    assert set(observed["group_size"]) == {4, 8}
    truth = fixed.assign(t=tie_probability(prompts.loc[fixed["prompt_id"].astype(str), "p"].to_numpy(),
                                           fixed["group_size"].to_numpy()))
    truth = truth.groupby([truth["difficulty"].astype(str), "group_size"])["t"].mean()
    for row in observed.itertuples(index=False):
        assert row.ci_low <= truth[(str(row.difficulty), row.group_size)] <= row.ci_high
    text = group_size_section.section(tables, Context(tables.root, tables.root / "report", ("sampler",), {})).text
    assert "## Group size" in text and "Observed against predicted" in text


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of k-subsets of n samples (c right) holding a right one, by enumeration."""
    items = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(items[i] for i in s) for s in subsets) / len(subsets)


def coverage_eval(p_base: np.ndarray, p_trained: np.ndarray, n: int, jobs: int = 1) -> pd.DataFrame:
    prompts = pd.DataFrame({"prompt_id": [f"q{i}" for i in range(len(p_base))], "difficulty": "1"})
    frames = []
    for j in range(jobs):
        base = eval_table(prompts.assign(p=p_base), f"r{j}", [0], n, seed=10 * j).to_pandas()
        trained = eval_table(prompts.assign(p=p_trained), f"r{j}", [50], n, seed=10 * j + 1).to_pandas()
        frames.append(pd.concat([base, trained]).assign(job=str(j), sampler="fixed"))
    return pd.concat(frames, ignore_index=True)


def test_coverage_curves_match_a_brute_force_recount():
    rng = np.random.default_rng(2)
    eval = coverage_eval(rng.uniform(0, 0.6, 12), rng.uniform(0, 0.9, 12), n=8, jobs=2)
    curves, _ = coverage(eval, n_boot=100)
    curves = curves[curves["difficulty"] == "all"].set_index("k")
    for k in (1, 3, 8):
        per_model = {}
        for model, step in (("base", 0), ("trained", 50)):
            rows = eval[eval["step"] == step]
            per_prompt = [np.mean([brute_pass_at_k(len(r), int(r["correct"].sum()), k)
                                   for _, r in by_job.groupby("job")])
                          for _, by_job in rows.groupby("prompt_id")]
            per_model[model] = np.mean(per_prompt)
        assert curves.loc[k, "base"] == pytest.approx(per_model["base"])
        assert curves.loc[k, "trained"] == pytest.approx(per_model["trained"])
    assert comb(8, 3) == 56  # the enumeration above covered every subset


def test_crossing_recovers_a_known_crossing():
    """Trained sharpens: easy prompts up, hard prompts to zero. pass@k means cross where the exact
    curves 1 - (1-p)^k do."""
    rng = np.random.default_rng(4)
    p_base = rng.uniform(0.02, 0.6, 300)
    p_trained = np.where(p_base > 0.25, np.minimum(p_base + 0.35, 1), 0.0)
    ks = np.arange(1, 33)
    exact = crossing_k((1 - (1 - p_trained[:, None]) ** ks).mean(0) - (1 - (1 - p_base[:, None]) ** ks).mean(0), ks)
    assert 1 < exact < 32
    _, crossings = coverage(coverage_eval(p_base, p_trained, n=32), n_boot=300)
    row = crossings.set_index("difficulty").loc["all"]
    assert row.gain_at_1 > 0 and row.cross_low <= exact <= row.cross_high, (exact, row)
    assert "overtaken by the base at k = " in coverage_section.describe(
        *coverage(coverage_eval(p_base, p_trained, n=32)), ["sampler"])


def test_coverage_gains_are_students_t_over_seeds_and_a_prompt_bootstrap_at_one_seed():
    """With several jobs (seeds) each k's gain interval is Student's t over the per-job gains (each job's mean over
    the prompts of trained − base pass@k), recounted here with scipy.stats from the raw answers; with one job there
    is no seed replicate and it is a bootstrap over prompts, said in `interval`. The crossing's bounds are read
    from those intervals (`crossing_bounds`)."""
    from scipy import stats
    from scipy.special import comb as choose

    rng = np.random.default_rng(6)
    p_base, p_trained = rng.uniform(0.02, 0.6, 30), rng.uniform(0.1, 0.9, 30)
    eval = coverage_eval(p_base, p_trained, n=8, jobs=4)
    curves, crossings = coverage(eval, n_boot=100)
    assert set(crossings["interval"]) == {"seeds"} and set(crossings["seeds"]) == {4}
    for k in (1, 4, 8):
        gains = []
        for _, job in eval.groupby("job"):
            right = job.groupby(["step", "prompt_id"])["correct"].agg(["size", "sum"])
            at_k = 1 - pd.Series(choose(right["size"] - right["sum"], k) / choose(right["size"], k), right.index)
            gains.append(at_k.loc[50].mean() - at_k.loc[0].mean())
        gains = np.array(gains)
        row = curves[(curves["difficulty"] == "all") & (curves["k"] == k)].squeeze()
        assert row["gain"] == pytest.approx(gains.mean())
        want = stats.t.interval(0.95, 3, gains.mean(), stats.sem(gains))
        assert (row["gain_low"], row["gain_high"]) == pytest.approx(want, rel=1e-9)
    _, alone = coverage(coverage_eval(p_base, p_trained, n=8, jobs=1), n_boot=100)
    assert set(alone["interval"]) == {"prompts, one seed"} and set(alone["seeds"]) == {1}


def test_crossing_bounds_are_read_from_the_gain_intervals():
    ks = np.array([1, 2, 4, 8, 16])
    low = np.array([0.1, 0.05, -0.01, -0.08, -0.2])
    high = np.array([0.3, 0.2, 0.1, 0.02, -0.05])
    assert crossing_bounds(low, high, ks) == (4, 16)  # may be behind from k = 4, behind from k = 16
    assert crossing_bounds(low, high + 1, ks) == (4, np.inf)  # never established
    assert crossing_bounds(np.r_[-0.1, low[1:]], high, ks) == (4, np.inf)  # no established gain to lose at k = 1
    assert crossing_bounds(np.full(5, 0.1), np.full(5, 0.3), ks) == (np.inf, np.inf)


def test_crossing_k():
    ks = np.array([1, 2, 4, 8])
    assert crossing_k(np.array([0.2, 0.1, 0.0, -0.1]), ks) == 8  # meeting (0) is not crossing
    assert np.isnan(crossing_k(np.array([0.2, 0.1, 0.05, 0.01]), ks))
    assert np.isnan(crossing_k(np.array([-0.1, 0.1, 0.0, 0.0]), ks))
