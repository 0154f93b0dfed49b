"""The training-health figure: its curves against a plain loop, and a real PNG at report resolution."""

import numpy as np
import pandas as pd
from PIL import Image

from analysis.measures.health import PANELS, flat_metrics, health_bands, health_curves, no_kl_jobs
from analysis.render.curves import health


def _steps(seed: int, sampler: str, n: int, per_step: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"step": np.arange(1, n + 1), "samples_total": per_step * np.arange(1, n + 1)})
    for metric in PANELS:
        frame[metric] = rng.random(n)
    frame.loc[3, "kl"] = np.nan  # a step with no update
    return frame.assign(job=f"{sampler}-{seed}", sampler=sampler, seed=seed)


def _plain_rolling(values: list[float], window: int) -> list[float]:
    """Centred mean over `window` values, NaN skipped, as pandas' rolling(center=True) places it."""
    out = []
    for i in range(len(values)):
        lo = i - window // 2
        hi = lo + window
        inside = [v for v in values[max(lo, 0):min(hi, len(values))] if not np.isnan(v)]
        out.append(sum(inside) / len(inside) if inside else np.nan)
    return out


def test_curves_are_rolling_means_per_job_against_samples():
    steps = pd.concat([_steps(0, "fixed", 100, 64), _steps(1, "fixed", 100, 64), _steps(0, "resample", 60, 110)])
    curves = health_curves(steps, ["sampler"], points=20)
    assert set(curves["arm"]) == {"sampler=fixed", "sampler=resample"}
    assert curves.groupby("arm")["job"].nunique().to_dict() == {"sampler=fixed": 2, "sampler=resample": 1}
    for (job, metric), got in curves.groupby(["job", "metric"]):
        raw = steps[steps["job"] == job].sort_values("step")
        window = max(len(raw) // 20, 1)
        assert got["samples_total"].tolist() == raw["samples_total"].tolist()
        np.testing.assert_allclose(got["value"], _plain_rolling(raw[metric].tolist(), window), equal_nan=True)


def test_bands_are_the_mean_and_extremes_of_the_jobs_on_a_common_grid():
    steps = pd.concat([_steps(s, "fixed", 50, 64 + 8 * s) for s in range(5)])
    curves = health_curves(steps, ["sampler"], points=10)
    bands = health_bands(curves, points=7)
    reward = bands[bands["metric"] == "reward_mean"]
    grid = reward["samples_total"].to_numpy()
    assert grid[0] == 64 + 8 * 4 and grid[-1] == 50 * 64  # from the latest first point to the fewest samples drawn
    lines = [np.interp(grid, run["samples_total"], run["value"]) for _, run in
             curves[curves["metric"] == "reward_mean"].groupby("job")]
    np.testing.assert_allclose(reward["mean"], np.mean(lines, axis=0))
    np.testing.assert_allclose(reward["low"], np.min(lines, axis=0))
    assert (reward["jobs"] == 5).all()


def test_flat_panels_are_left_out():
    steps = pd.concat([_steps(s, "fixed", 30, 64) for s in range(2)]).assign(clip_frac=0.0)
    assert flat_metrics(health_curves(steps, ["sampler"])) == ["clip_frac"]


def test_jobs_without_a_reference_draw_no_kl_and_a_sweep_of_them_no_kl_panel():
    """algo.beta = 0 logs kl NaN at every step: those jobs are named, and the panel goes when no job has a KL;
    a job with some steps unmeasured (no update) still has its line."""
    with_ref, without = _steps(0, "fixed", 30, 64), _steps(1, "fixed", 30, 64).assign(kl=np.nan)
    curves = health_curves(pd.concat([with_ref, without]), ["sampler"])
    assert no_kl_jobs(curves).tolist() == ["fixed-1"] and "kl" not in flat_metrics(curves)
    alone = health_curves(without, ["sampler"])
    assert no_kl_jobs(alone).tolist() == ["fixed-1"] and flat_metrics(alone) == ["kl"]


def test_figure_is_a_readable_png(tmp_path):
    for jobs in (2, 5):  # a line per job, then an arm's mean and band
        steps = pd.concat([_steps(s, name, 80, 64) for s in range(jobs) for name in ("fixed", "resample_on_tie")])
        path = health(health_curves(steps, ["sampler"]), tmp_path / "figures" / f"health{jobs}.png")
        with Image.open(path) as img:
            assert img.info["dpi"][0] >= 150
            assert img.size[0] >= 1500  # wide enough to stay sharp at GitHub's page width


def test_the_rollout_mismatch_is_drawn_only_past_rounding_and_summed_up_per_arm():
    """Steps written before the mismatch was measured have no such columns: no panel. The hf engine's own decode
    measures ~1e-6: its panels are left out. Past 1e-3 (another engine, bf16) both panels are drawn."""
    from analysis.measures.health import MISMATCH, ROUNDING, mismatch_by_arm

    old = pd.concat([_steps(s, "fixed", 30, 64) for s in range(2)]).drop(columns=list(MISMATCH))
    assert not any(m in set(health_curves(old, ["sampler"])["metric"]) for m in MISMATCH)
    assert mismatch_by_arm(old, ["sampler"]).empty
    hf = pd.concat([_steps(s, "fixed", 30, 64) for s in range(2)])
    hf["rollout_logp_diff_max"] = hf["rollout_logp_diff_max"] * ROUNDING  # all at or under rounding
    assert set(MISMATCH) <= set(flat_metrics(health_curves(hf, ["sampler"])))
    mixed = pd.concat([hf, _steps(5, "vllm", 30, 64)])
    assert not set(MISMATCH) & set(flat_metrics(health_curves(mixed, ["sampler"])))
    rng = np.random.default_rng(3)
    mixed = mixed.assign(rollout_logp_diff_mean=rng.random(len(mixed)), rollout_ess=rng.random(len(mixed)),
                         rollout_capped=rng.random(len(mixed)))
    mixed.loc[mixed.index[:4], "rollout_logp_diff_mean"] = np.nan  # steps with no update measure nothing
    got = mismatch_by_arm(mixed, ["sampler"]).set_index("arm")
    for name, rows in mixed.groupby("sampler"):
        rows = rows[rows["rollout_logp_diff_mean"].notna()]
        want = (len(rows), rows["rollout_logp_diff_mean"].sum() / len(rows), max(rows["rollout_logp_diff_max"]),
                rows["rollout_kl"].sum() / len(rows), min(rows["rollout_ess"]),
                rows["rollout_capped"].sum() / len(rows))
        np.testing.assert_allclose(got.loc[f"sampler={name}"].to_numpy(float), want)
