"""Several sources, one report: two sweeps written apart give the report one sweep of all their
jobs gives, the same numbers to the last bit; a run found twice counts once; the sources are named."""

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent
TRAIN, HELD = prompt_pool(("1", "2"), 8), prompt_pool(("1", "2"), 6, seed=4)


def configs(sampler: str) -> list[dict]:
    return [job_config(sampler, group_size=4, seed=seed, max_steps=8, prompts_per_step=6) for seed in (0, 1, 2)]


def sweep(root: Path, cfgs: list[dict], prefix: str) -> Path:
    return write_sweep(root, cfgs, TRAIN, eval_prompts=HELD, eval_n=8, run_prefix=prefix)


def build(paths, out: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(paths, out).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sources")
    one = sweep(tmp / "one", configs("fixed") + configs("resample_on_tie"), "both")
    # the same runs, written as two sweeps (run ids as in `one`, so each run is the same run)
    a = write_sweep(tmp / "a", configs("fixed"), TRAIN, eval_prompts=HELD, eval_n=8, run_prefix="both")
    b = tmp / "b"
    sweep(tmp / "b_src", configs("fixed") + configs("resample_on_tie"), "both")
    b.mkdir()
    for i in (3, 4, 5):  # the resample_on_tie jobs only, under their own folders
        shutil.copytree(tmp / "b_src" / str(i), b / str(i - 3))
    return one, a, b, build(one, tmp / "r_one"), build([a, b], tmp / "r_two")


def test_two_sweeps_give_the_report_of_one(built):
    one, a, b, r_one, r_two = built
    for table in ("tests.csv", "at_k_comparisons.csv", "ties_by_difficulty.csv", "budget_by_arm.csv"):
        want, got = pd.read_csv(r_one / "tables" / table), pd.read_csv(r_two / "tables" / table)
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=table)
    tests = pd.read_csv(r_two / "tables" / "tests.csv")
    assert tests["paired"].all() and (tests["seeds_a"] == 3).all()  # paired by seed across the two sweeps
    text = (r_two / "REPORT.md").read_text()
    assert "- Sources (2, relative to this report; a job is named `<source>/<job>`): `../a`, `../b`" in text
    findings = lambda t: t[t.index("## Findings"):t.index("<details>")]  # noqa: E731
    assert findings(text) == findings((r_one / "REPORT.md").read_text())


def test_a_run_found_twice_counts_once(built, tmp_path):
    one, a, b, r_one, _ = built
    copy = tmp_path / "copy"
    shutil.copytree(one / "0", copy)  # one job of `one`, copied out
    out = build([one, copy], tmp_path / "report")
    tests = pd.read_csv(out / "tables" / "tests.csv")
    pd.testing.assert_frame_equal(tests, pd.read_csv(r_one / "tables" / "tests.csv"), check_exact=True)
    jobs = (out / "DETAILS.md").read_text()
    assert "a copy of job one/0 (the same run id, both-0, in its run.json): each run counts once" in jobs


def test_several_sources_need_an_out_folder_and_say_so(built):
    _, a, b, _, _ = built
    out = subprocess.run([sys.executable, "-m", "analysis", str(a), str(b)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.strip() == "error: 2 sources: say where their report goes with --out DIR"


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """sampler x algo.beta, three seeds each: 12 jobs."""
    cfgs = []
    for beta in (0.04, 0.0):
        for cfg in configs("fixed") + configs("resample_on_tie"):
            cfg["algo"]["beta"] = beta
            cfgs.append(cfg)
    return sweep(tmp_path_factory.mktemp("grid") / "sweep", cfgs, "grid")


def test_where_keeps_the_jobs_a_sweep_of_them_alone_would_hold(grid, built, tmp_path):
    one, _, _, r_one, _ = built  # `one` is the beta=0.04 half of the grid, as its own sweep
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(grid, tmp_path / "r", where=["algo.beta=0.04"]).parent
    pd.testing.assert_frame_equal(pd.read_csv(out / "tables" / "tests.csv"),
                                  pd.read_csv(r_one / "tables" / "tests.csv"), check_exact=True)


def test_by_names_the_arms_and_says_what_it_pools(grid, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(grid, tmp_path / "r", by=["sampler"]).parent
    tests = pd.read_csv(out / "tables" / "tests.csv")
    assert set(tests["a"]) == {"sampler=fixed"} and set(tests["b"]) == {"sampler=resample_on_tie"}
    text = (out / "REPORT.md").read_text()
    assert ("- **Pooled within arms**: `algo.beta` (0.0, 0.04) varies between jobs but is not an arm key (`--by`): "
            "each arm pools its jobs over these values.") in text


def test_baseline_is_a_in_every_difference(built, tmp_path):
    one, _, _, r_one, _ = built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(one, tmp_path / "r", baseline="sampler=resample_on_tie").parent
    flipped, plain = pd.read_csv(out / "tables" / "tests.csv"), pd.read_csv(r_one / "tables" / "tests.csv")
    assert set(flipped["a"]) == {"sampler=resample_on_tie"}
    assert flipped["difference"].to_numpy() == pytest.approx(-plain["difference"].to_numpy())
    assert flipped["p_value"].to_numpy() == pytest.approx(plain["p_value"].to_numpy())


@pytest.mark.parametrize("args, message", [
    (["--where", "sampler=fixd"], "error: --where sampler=fixd: no job has it (sampler is fixed, resample_on_tie)"),
    (["--by", "algo.nope"], "error: --by algo.nope: no job has this key (keys that vary here: seed, sampler)"),
    (["--baseline", "sampler"], "error: --baseline 'sampler': expected KEY=VALUE (e.g. sampler=fixed)"),
])
def test_a_choice_that_names_nothing_is_one_line(built, tmp_path, args, message):
    one = built[0]
    out = subprocess.run([sys.executable, "-m", "analysis", str(one), "--out", str(tmp_path / "r"), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.strip() == message, out.stderr[-2000:]
    assert not (tmp_path / "r").exists()


def test_a_two_key_grid_compares_within_each_level_of_the_second_key(grid, built, tmp_path):
    _, _, _, r_one, _ = built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(grid, tmp_path / "r").parent
    tests = pd.read_csv(out / "tables" / "tests.csv")
    beta = lambda label: next(p for p in label.split(", ") if p.startswith("algo.beta="))  # noqa: E731
    assert (tests["a"].map(beta) == tests["b"].map(beta)).all()  # never across learning settings
    assert (tests.groupby("metric").size() == 2).all() and (tests["family"] == 2).all()
    # at beta 0.04 the comparison is the one a sweep of that level alone makes (only Holm's family grows)
    mine = tests[tests["a"].str.contains("algo.beta=0.04")].set_index("metric")
    alone = pd.read_csv(r_one / "tables" / "tests.csv").set_index("metric")
    for column in ("difference", "ci_low", "ci_high", "p_value"):
        assert mine.loc[alone.index, column].to_numpy() == pytest.approx(alone[column].to_numpy(), rel=1e-12)
    held = pd.read_csv(out / "tables" / "at_k_comparisons.csv")
    between = held[held["checkpoint"] != "final vs base"]
    assert (between["a"].map(beta) == between["b"].map(beta)).all()


@pytest.mark.parametrize("key, value", [("max_samples", 96), ("task.eval_per_level", 4), ("eval.temperature", 0.7)])
def test_sources_that_differ_in_task_evaluation_or_budget_are_refused(built, tmp_path, key, value):
    """A sweep of its own task, evaluation or budget beside another makes every comparison across them one of
    that setting too: refused in one line naming the key and each source's values, nothing written; naming
    the key as an arm (--by) accepts it."""
    a = built[1]
    cfgs = configs("resample_on_tie")
    for cfg in cfgs:
        section, _, leaf = key.rpartition(".")
        (cfg[section] if section else cfg)[leaf] = value
    other = sweep(tmp_path / "other", cfgs, "other")
    out = subprocess.run([sys.executable, "-m", "analysis", str(a), str(other), "--out", str(tmp_path / "r")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    line = out.stderr.strip()
    assert line.startswith(f"error: the sources differ in {key} (a: ") and f"other: {value}" in line
    assert "\n" not in line and not (tmp_path / "r").exists()
    if key == "max_samples":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accepted = build_report([a, other], tmp_path / "by", by=["sampler", "max_samples"]).parent
        assert pd.read_csv(accepted / "tables" / "tests.csv")["a"].str.contains("max_samples").all()


def test_a_grids_heldout_figure_is_faceted_by_the_second_key(grid, tmp_path):
    """Each panel of a grid's held-out figure holds the first key's arms at one level of the second, named in
    its title, each arm (sampler and beta) in one colour of its own in every panel; and the report draws it."""
    from analysis.render.scores import heldout_panels

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(grid, tmp_path / "r").parent
    bands = pd.read_csv(out / "tables" / "heldout.csv")
    panels = heldout_panels(bands, ["sampler", "algo.beta"])
    metrics = bands[["metric", "k"]].drop_duplicates()
    assert len(panels) == 2 * len(metrics)
    colours = {}
    for title, arms in panels:
        beta = title.rpartition("algo.beta=")[2]
        assert beta in ("0.0", "0.04") and [label for label, _, _ in arms] == [
            f"sampler={sampler}, algo.beta={beta}" for sampler in ("fixed", "resample_on_tie")]
        for label, colour, rows in arms:
            assert (rows["algo.beta"].astype(str) == beta).all() and len(rows)
            assert colours.setdefault(label, colour) == colour
    assert len(set(colours.values())) == 4  # one colour an arm, as in every figure of the report
    assert (out / "figures" / "heldout.png").stat().st_size > 10_000
    one = heldout_panels(bands[bands["algo.beta"].astype(str) == "0.04"], ["sampler"])  # no grid: one panel a metric
    assert len(one) == len(metrics) and all(", algo.beta" not in title for title, _ in one)
