"""Words a reviewer would reject: "ahead" only where the interval excludes zero, a crossing stated
only where its interval is bounded, and no infinite minimum detectable difference printed as a number."""

import math

import numpy as np
import pandas as pd
import pytest
from reference import report_lines

from analysis.sections.coverage import verdict
from analysis.sections.in_words import _power


def curve(gains: list[tuple[float, float, float]]) -> pd.DataFrame:
    """A gain curve on all prompts: one (gain, low, high) per k = 1, 2, ..."""
    return pd.DataFrame([{"k": k, "gain": g, "gain_low": lo, "gain_high": hi, "difficulty": "all"}
                         for k, (g, lo, hi) in enumerate(gains, start=1)])


def crossing(cross_k: float = math.nan, low: float = math.nan, high: float = math.nan) -> pd.Series:
    return pd.Series({"cross_k": cross_k, "cross_low": low, "cross_high": high})


def test_ahead_only_where_the_interval_excludes_zero():
    # the gain at the largest k is exactly 0 with no spread (every prompt solved by both): not "still ahead"
    flat = verdict(crossing(), curve([(0.2, 0.1, 0.3), (0.05, -0.01, 0.1), (0.0, 0.0, 0.0)]))
    assert "still ahead" not in flat and "no detectable difference at k = 3" in flat
    assert verdict(crossing(), curve([(0.2, 0.1, 0.3), (0.1, 0.02, 0.2)])).endswith(
        "still ahead at k = 2 (gain +0.100 [+0.020, +0.200])")
    # no gain to begin with: never "ahead", whatever the point estimate
    assert verdict(crossing(), curve([(0.05, -0.02, 0.1), (0.01, -0.05, 0.06)])).startswith(
        "no detectable gain over the base at k = 1")
    assert verdict(crossing(), curve([(-0.1, -0.2, -0.05)])).startswith("behind the base at k = 1")


def test_a_crossing_is_stated_only_where_its_interval_is_bounded():
    gains = curve([(0.2, 0.1, 0.3), (-0.01, -0.05, 0.03), (-0.02, -0.06, 0.02)])
    unbounded = verdict(crossing(2, 2, np.inf), gains)
    assert "overtaken" not in unbounded and "no crossing is established" in unbounded
    assert "first reaches below zero at k = 2 and lies below it at no k up to 3" in unbounded
    bounded = verdict(crossing(2, 2, 3), gains)
    assert bounded.endswith("overtaken by the base at k = 2 (the gain's 95% interval first reaches below zero at "
                            "k = 2 and lies below it from k = 3)")


def row(**fields) -> pd.Series:
    base = {"seeds_a": 4, "seeds_b": 4, "smallest_p": 0.125, "mde": math.inf, "interval": "seeds"}
    return pd.Series({**base, **fields})


def test_no_infinite_detectable_difference_is_printed():
    unreachable = _power(row())
    assert "inf" not in unreachable and "no difference of any size can be detected" in unreachable
    assert "0.125" in unreachable
    lonely = _power(row(seeds_a=1, seeds_b=1, smallest_p=0.01, mde=math.nan))
    assert "nan" not in lonely.lower() and "fewer than two seeds" in lonely
    finite = _power(row(seeds_a=10, seeds_b=10, smallest_p=0.002, mde=0.0312))
    assert finite.endswith("is 0.0312.")


def _build(root):
    import warnings

    from analysis.report import build_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(root)


def _findings(report) -> list[str]:
    return report_lines(report)


def _raw_groups(root) -> pd.DataFrame:
    """Every job's groups parts, read with pyarrow alone, and its sampler and seed from its config."""
    import json

    import pyarrow.parquet as pq
    import yaml

    frames = []
    for job in sorted(p for p in root.iterdir() if (p / "run.json").exists()):
        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        part = pq.read_table(job / "groups").to_pandas()
        frames.append(part.assign(job=job.name, sampler=cfg["sampler"]["name"], seed=cfg["seed"],
                                  advantage=cfg["algo"].get("advantage", "grpo"),
                                  run=json.loads((job / "run.json").read_text())["run_id"]))
    return pd.concat(frames, ignore_index=True)


def test_a_pooled_difference_reversed_at_every_difficulty_is_said_in_its_sentence(tmp_path):
    """A Simpson reversal whose truth is set: resample_on_tie redraws where groups tie, at the easiest and the
    hardest levels, so it wastes fewer samples at every level but more pooled (its samples go where waste is)."""
    from fixtures.synthetic import job_config, write_sweep

    levels = ("1", "2", "3", "4")
    prompts = pd.DataFrame({"prompt_id": [f"L{lv}-{i}" for lv in levels for i in range(24)],
                            "difficulty": np.repeat(levels, 24), "p": np.repeat([0.98, 0.6, 0.4, 0.005], 24)})
    configs = [job_config(s, group_size=8, seed=seed, max_steps=30, prompts_per_step=6, max_rounds=4)
               for s in ("fixed", "resample_on_tie") for seed in range(6)]
    root = write_sweep(tmp_path / "sweep", configs, prompts)
    # the truth, recounted from the raw parts: lower at every level, higher pooled (per job, mean over seeds)
    raw = _raw_groups(root)
    raw["wasted"] = raw["group_size"] - raw["n_informative"]
    level = raw.groupby(["sampler", "difficulty"])[["wasted", "group_size"]].sum()
    level = level["wasted"] / level["group_size"]
    assert (level["resample_on_tie"] < level["fixed"]).all()
    per_job = raw.groupby(["sampler", "job"])[["wasted", "group_size"]].sum()
    pooled = (per_job["wasted"] / per_job["group_size"]).groupby("sampler").mean()
    assert pooled["resample_on_tie"] > pooled["fixed"]

    line = next(f for f in _findings(_build(root)) if f.startswith("wasted_frac:"))
    assert "Reversed by difficulty (Simpson's paradox): pooled over the difficulties (summed over seeds) " \
        "wasted_frac is " in line and "yet resample_on_tie is lower at each level with data" in line
    for d in levels:  # each level's value, as recounted
        assert f"{d} {level['fixed'][d]:.3f} → {level['resample_on_tie'][d]:.3f}" in line
    share = raw.groupby(["sampler", "difficulty"])["group_size"].sum()
    share = share / share.groupby("sampler").transform("sum")
    assert f"4 {share['fixed']['4']:.0%} → {share['resample_on_tie']['4']:.0%}" in line
    assert "the gap is widest" not in line  # the widest gap of a reversed difference would mislead


def test_quantities_an_arms_rule_fixes_are_never_ranked_or_counted(tmp_path):
    """Three arms whose configs set what their rules fix: RL-ZVP's informative share (by its advantage rule, from
    its config alone), and groups of 4 against groups of 8 on the tie fraction."""
    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    configs = []
    for advantage, size in (("grpo", 8), ("rl_zvp", 8), ("grpo", 4)):
        for seed in range(6):
            cfg = job_config("fixed", group_size=size, seed=seed, max_steps=12, prompts_per_step=4)
            cfg["algo"]["advantage"] = advantage
            configs.append(cfg)
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=16))
    import pyarrow as pa
    import pyarrow.parquet as pq

    for job in range(6, 12):  # the rl_zvp arm's groups as its rule makes them: every sample trains with an advantage
        for part in (root / str(job) / "groups").glob("part-*.parquet"):
            table = pq.read_table(part)
            pq.write_table(table.set_column(table.column_names.index("n_informative"), "n_informative",
                                            pa.array(table["group_size"].to_numpy(), pa.int16())), part)
    report = _build(root)
    tests = pd.read_csv(report.parent / "tables" / "tests.csv")
    fixed = tests[tests["by_construction"].notna()]
    wasted = tests[tests["metric"] == "wasted_frac"]
    # every wasted_frac pair with the rl_zvp arm, and every tie pair across group sizes, is fixed by construction
    assert set(map(tuple, fixed[fixed["metric"] == "wasted_frac"][["a", "b"]].to_numpy())) == {
        tuple(r) for r in wasted[["a", "b"]].to_numpy() if any("rl_zvp" in x for x in r)}
    ties = tests[tests["metric"] == "tie_frac (first rounds)"]
    assert set(map(tuple, fixed[fixed["metric"] == "tie_frac (first rounds)"][["a", "b"]].to_numpy())) == {
        tuple(r) for r in ties[["a", "b"]].to_numpy() if sum("group_size=4" in x for x in r) == 1}
    assert fixed["p_holm"].isna().all()
    kept = wasted[wasted["by_construction"].isna()]
    assert len(kept) == 1 and (kept["family"] == 1).all()  # Holm's family holds only the one real comparison
    # ranked on informative samples counted alike for every arm: RL-ZVP's forced advantages in tied groups left out,
    # its draws are grpo's (the same seeds), so it ranks exactly where grpo with groups of 8 does
    ranking = pd.read_csv(report.parent / "tables" / "ranking_informative.csv").set_index("arm")
    assert len(ranking) == 3
    zvp, grpo = (next(a for a in ranking.index if advantage in a and "group_size=8" in a) for advantage in
                 ("rl_zvp", "advantage=grpo"))
    assert ranking.loc[zvp, "mean"] == pytest.approx(ranking.loc[grpo, "mean"])
    text = "\n".join(_findings(report))
    assert "RL-ZVP gives every" in text  # its as-trained share, by construction, in the wasted_frac lines


def test_a_difference_of_training_progress_is_attributed_to_updates(tmp_path):
    """Arms identical per update (the held-out model improves with each optimizer step, whatever it drew) but
    drawing 4 or 8 prompts a step to one sample budget: at equal samples the arm of 4 has taken twice the updates
    and scores higher; at equal updates the gap vanishes. The report must say both, with both counts."""
    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    configs = [job_config("fixed", group_size=8, seed=seed, max_steps=64, prompts_per_step=size,
                          eval_every_samples=1024) for size in (8, 4) for seed in range(6)]
    for cfg in configs:
        cfg["max_samples"] = 2048
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=16),
                       eval_prompts=prompt_pool(levels=("1", "2"), per_level=24, seed=3), eval_n=8, eval_every=8,
                       eval_learn=0.04, stop_steps=[32] * 6 + [64] * 6)  # each ended by max_samples
    report = _build(root)
    table = pd.read_csv(report.parent / "tables" / "at_k_comparisons.csv")
    steps = table[(table["alignment"] == "updates") & (table["metric"] == "pass@k") & (table["k"] == 1)]
    assert len(steps) == 1 and steps["checkpoint"].iloc[0] == "32 updates"
    row = steps.iloc[0]
    assert set(row["steps_a"].split(", ")) == {"32"} and row["steps_a"] == row["steps_b"]
    assert row["samples_a"] == 2048 and row["samples_b"] == 1024  # equal updates: unequal samples, said in the row
    assert row["a_had_more"] == "samples, tokens" and pd.isna(row["b_had_more"])
    # recount at equal updates from the raw eval parts: each job's mean pass@1 at step 32 (an update every step)
    raw = []
    for job in sorted(p for p in root.iterdir() if (p / "run.json").exists()):
        import pyarrow.parquet as pq
        import yaml

        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        rows = pq.read_table(job / "eval").to_pandas()
        rows = rows[rows["step"] == 32]
        raw.append((cfg["prompts_per_step"], rows.groupby("prompt_id")["correct"].mean().mean()))
    means = pd.DataFrame(raw, columns=["size", "pass1"]).groupby("size")["pass1"].mean()
    assert row["mean_a"] == pytest.approx(means[8]) and row["mean_b"] == pytest.approx(means[4])
    line = next(f for f in _findings(report) if f.startswith("held-out pass@1:"))
    assert "At equal samples 8 took 32 updates and 4 64" in line
    assert "a detectable difference" in line.split("At equal samples")[0]
    assert "4 won with more updates ×2" in line.split("At equal samples")[0]  # what the winner had more of
    assert "holds at equal samples, not at equal updates" in line and "(32 updates)" in line


def test_arms_evaluated_on_a_token_schedule_are_compared_at_equal_tokens(tmp_path):
    """With `eval.every_tokens`, each job is evaluated on crossing every multiple of it: the report compares the
    arms at the largest multiple every job crossed (`alignment` = tokens), each job at its first checkpoint past
    it, and says the tokens each side had generated there."""
    from analysis.data.alignment import token_points
    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    configs = [job_config("fixed", group_size=8, seed=seed, max_steps=64, prompts_per_step=size)
               for size in (8, 4) for seed in range(4)]
    for cfg in configs:
        cfg["eval"]["every_tokens"] = 2000
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=16),
                       eval_prompts=prompt_pool(levels=("1", "2"), per_level=12, seed=3), eval_n=4,
                       stop_steps=[32] * 4 + [64] * 4)
    table = pd.read_csv(_build(root).parent / "tables" / "at_k_comparisons.csv")
    tokens = table[(table["alignment"] == "tokens") & (table["metric"] == "pass@k") & (table["k"] == 1)]
    assert len(tokens) == 1
    # the truth from the raw parts: every job's eval checkpoints and the tokens it had generated there
    import pyarrow.parquet as pq

    crossed = []
    for job in sorted(p for p in root.iterdir() if (p / "run.json").exists()):
        rows = pq.read_table(job / "eval", columns=["step", "tokens_total"]).to_pandas().drop_duplicates("step")
        points = token_points(rows.assign(**{"eval.every_tokens": 2000}))
        crossed.append(set(points[rows["step"] > 0]))
    point = max(set.intersection(*crossed))
    assert tokens["checkpoint"].iloc[0] == f"{point:,.0f} tokens"
    assert point <= tokens["tokens_a"].iloc[0] < point + 2000 and point <= tokens["tokens_b"].iloc[0] < point + 2000


def test_arms_swept_as_a_preset_are_named_as_the_user_named_them(tmp_path):
    """A sweep over `arm=grpo,ngrpo,dynamic` (presets of several keys each): every sentence, table and figure names
    the arms grpo, ngrpo, dynamic, not the keys each sets; the keys stay in the config columns."""
    import yaml

    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    arms = {"grpo": ("fixed", "grpo"), "ngrpo": ("fixed", "ngrpo"), "dynamic": ("dynamic", "grpo")}
    configs = []
    for sampler, advantage in arms.values():
        for seed in range(3):
            cfg = job_config(sampler, group_size=4, seed=seed, max_steps=8, prompts_per_step=4)
            cfg["algo"]["advantage"] = advantage
            configs.append(cfg)
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=8))
    for i, cfg in enumerate(configs):  # the command line chose the preset: Hydra records it as an override
        name = list(arms)[i // 3]
        (root / str(i) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"arm={name}", f"seed={cfg['seed']}"]))
    report = _build(root)
    tests = pd.read_csv(report.parent / "tables" / "tests.csv")
    assert set(tests["a"]) | set(tests["b"]) == {"arm=grpo", "arm=ngrpo", "arm=dynamic"}
    text = report.read_text()
    assert "algo.advantage=ngrpo" not in text and "sampler=dynamic," not in text
    assert "ngrpo" in "\n".join(_findings(report))


def test_a_rule_explains_a_difference_only_in_its_own_direction():
    """PODS wastes more by construction, RL-ZVP less, a larger group ties less: the other way round, a difference
    is a finding like any other, never put aside."""
    from analysis.measures.construction import LESS, MORE, Fixed

    fixed = Fixed(wasted={"pods": [(MORE, "cap")], "rl_zvp": [(LESS, "every sample")]},
                  sizes={"pods": (16,), "grpo": (8,)})
    assert fixed.reason("wasted_frac", "grpo", "pods", 0.2) == "pods: cap"  # pods wastes more: its rule
    assert fixed.reason("wasted_frac", "grpo", "pods", -0.1) is None  # pods wastes less: a finding
    assert fixed.reason("wasted_frac", "rl_zvp", "grpo", 0.3) == "rl_zvp: every sample"
    assert fixed.reason("wasted_frac", "rl_zvp", "grpo", -0.3) is None
    assert fixed.reason("wasted_frac", "pods", "rl_zvp", -0.5) == "pods: cap; rl_zvp: every sample"
    assert fixed.reason("tie_frac (first rounds)", "grpo", "pods", -0.16) is not None  # groups of 16 tie less
    assert fixed.reason("tie_frac (first rounds)", "grpo", "pods", 0.05) is None
    assert fixed.reason("held-out pass@1", "grpo", "pods", -0.2) is None


def test_final_checkpoints_name_what_they_share():
    """A final row's `alignment` is what the jobs' last checkpoints share: steps where every job ended at one
    step, else the budget that ended them (tokens for `max_tokens` alone), samples otherwise; never steps for
    jobs that ended at different steps, whatever their config says."""
    from analysis.data.alignment import SAMPLES, STEPS, TOKENS, final_alignment

    def rows(last_steps, **config):
        return pd.DataFrame([{"job": str(job), "step": step, **config} for job, last in enumerate(last_steps)
                             for step in range(0, last + 1, 4)])

    assert final_alignment(rows([12, 12])) == STEPS
    assert final_alignment(rows([12, 12], max_samples=960.0)) == STEPS  # the budget ended both at one step
    # ... and where they drew the same samples there, those: a loop step that skipped its update costs no less
    assert final_alignment(rows([12, 12], max_samples=960.0, samples_total=960)) == SAMPLES
    assert final_alignment(rows([12, 12], samples_total=960, updates=9)) != SAMPLES  # equal updates first
    assert final_alignment(rows([12, 8], max_samples=960.0)) == SAMPLES
    assert final_alignment(rows([12, 8], max_samples=None, max_tokens=5000.0)) == TOKENS
    assert final_alignment(rows([12, 8], max_samples=None, max_tokens=None)) == SAMPLES  # killed early: no budget
    assert final_alignment(rows([12, 8])) == SAMPLES


def test_a_step_every_job_evaluated_within_one_budget_multiple_is_compared_once_at_equal_steps(tmp_path):
    """`eval.every` steps beside `eval.every_samples` (tie_learning's schedule): a job's second checkpoint within
    one multiple of the budget keeps its step ("step 8"). Where every job has one at the same step, it is not a
    point of equal samples: the arms are compared there once, at equal updates, and the build does not fail."""
    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    configs = [job_config("fixed", group_size=8, seed=seed, max_steps=32, prompts_per_step=size)
               for size in (8, 4) for seed in range(4)]
    for cfg in configs:
        cfg["eval"]["every_samples"] = 400
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=16),
                       eval_prompts=prompt_pool(levels=("1", "2"), per_level=12, seed=3), eval_n=4, eval_every=8,
                       stop_steps=[16] * 4 + [32] * 4)
    table = pd.read_csv(_build(root).parent / "tables" / "at_k_comparisons.csv")
    pairs = table[table["checkpoint"] != "final vs base"]
    assert not pairs.duplicated(["metric", "k", "checkpoint"]).any()
    assert not pairs["checkpoint"].str.startswith("step ").any()  # a bare step is no point of equal samples
    assert set(pairs.loc[pairs["alignment"] == "updates", "checkpoint"]) == {"16 updates"}
    # at each point of equal samples the two arms had drawn within one multiple of each other
    between = pairs[pairs["checkpoint"].str.endswith(" samples")]
    assert len(between) and ((between["samples_a"] - between["samples_b"]).abs() < 400).all()
