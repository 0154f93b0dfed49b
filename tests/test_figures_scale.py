"""Figures that scale with the number of arms: none wider than MAX_WIDTH_PX whatever the arms, and past MANY_ARMS
the learning curves as small multiples, each arm in a panel of its own over the reference arm (the report's
first, a declared baseline), where seventeen bands on one axis would merge into one grey mass."""

import struct
import warnings
from pathlib import Path

import matplotlib.colors as mcolors
import pandas as pd
import pytest

from analysis.data.arms import short_label
from analysis.measures.spend import across_seeds
from analysis.render import intervals, ties
from analysis.render.canvas import MANY_ARMS, MAX_WIDTH_PX, REFERENCE, report_colours
from analysis.render.curves import budget_figure
from analysis.render.scores import at_k_figure, heldout_figure
from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent
RATES = [str(round((i + 1) / 1000, 3)) for i in range(17)]  # the 17 arms: one learning rate each, 0.001 to 0.017
BASELINE = RATES[9]  # declared: the report's first arm, the reference of every small panel


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk: big-endian uint32 at bytes 16..24."""
    return struct.unpack(">II", path.read_bytes()[16:24])


def sweep(root: Path, rates: list[str]) -> Path:
    """A sweep of one arm per learning rate, two seeds each, few steps: quick to build, as many arms as asked."""
    prompts = prompt_pool(levels=("1", "2", "3"), per_level=6)
    configs = []
    for rate in rates:
        for seed in (0, 1):
            cfg = job_config("fixed", group_size=4, seed=seed, max_steps=4, prompts_per_step=6)
            cfg["algo"]["lr"] = float(rate)
            configs.append(cfg)
    return write_sweep(root, configs, prompts, overrides=[f"algo.lr={','.join(rates)}", "seed=0,1"],
                       eval_prompts=prompts, eval_n=8, eval_every=2, learn=0.1, eval_learn=0.1)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """The 17-arm report, its baseline declared (not the first in the jobs' order); its folder and colours."""
    root = sweep(tmp_path_factory.mktemp("scale") / "sweep", RATES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(root, baseline=f"algo.lr={BASELINE}").parent
    jobs = pd.read_csv(out / "tables" / "checkpoints.csv")
    return out, report_colours(jobs, ["algo.lr"])


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


def reference_drawn(ax) -> bool:
    """Whether a panel holds the reference's grey dashed line."""
    return any(line.get_linestyle() == "--" and mcolors.to_hex(line.get_color()) == mcolors.to_hex(REFERENCE["color"])
               for line in ax.get_lines())


@pytest.mark.heavy  # builds a report
def test_no_figure_of_seventeen_arms_is_wider_than_the_cap(many):
    out, _ = many
    figures = sorted((out / "figures").glob("*.png"))
    assert {"heldout.png", "at_k.png", "budget_samples.png", "cost.png", "ties_by_difficulty.png",
            "ties_over_samples.png", "differences.png"} <= {p.name for p in figures}
    assert {p.name: png_size(p)[0] for p in figures if png_size(p)[0] > MAX_WIDTH_PX} == {}


@pytest.mark.heavy  # builds a report
def test_heldout_curves_are_one_small_panel_an_arm_over_the_reference(many):
    out, colours = many
    bands = pd.read_csv(out / "tables" / "heldout.csv")
    fig = heldout_figure(bands, ["algo.lr"], colours)
    metrics = len(bands[["metric", "k"]].drop_duplicates())
    shown = titles(fig)
    assert len(shown) == metrics * len(RATES)  # a panel per arm and metric, no more
    assert shown[0] == f"{BASELINE} (reference)"  # the declared baseline first, whatever the tables' order
    for rate in RATES:  # every arm exactly once per metric
        assert sum(title.removesuffix(" (reference)") == rate for title in shown) == metrics
    for ax in fig.axes:  # the reference in grey in every panel but its own, the arm in its report colour
        rate = ax.get_title().removesuffix(" (reference)")
        assert reference_drawn(ax) == (rate != BASELINE)
        drawn = {mcolors.to_hex(line.get_color()) for line in ax.get_lines()}
        assert mcolors.to_hex(colours[f"algo.lr={rate}"]) in drawn
    # one scale across a metric's panels
    assert len({(ax.get_xlim(), ax.get_ylim()) for ax in fig.axes[:len(RATES)]}) == 1


@pytest.mark.heavy  # builds a report
def test_at_k_is_a_row_of_panels_an_arm(many):
    out, colours = many
    curves = pd.read_csv(out / "tables" / "at_k.csv")
    fig = at_k_figure(curves, ["algo.lr"], colours=colours)
    arms = [title.split(":")[0].removesuffix(" (reference)") for title in titles(fig)]
    levels = len(fig.axes) // len(RATES)
    assert levels >= 2 and len(fig.axes) == levels * len(RATES)
    assert arms[:levels] == [BASELINE] * levels and titles(fig)[0].startswith(f"{BASELINE} (reference):")
    assert sorted(set(arms)) == sorted(RATES) and all(arms.count(rate) == levels for rate in RATES)
    assert [reference_drawn(ax) for ax in fig.axes] == [arm != BASELINE for arm in arms]


@pytest.mark.heavy  # builds a report
def test_budget_curves_are_one_small_panel_an_arm(many):
    out, colours = many
    curves = pd.read_csv(out / "tables" / "budget_curves_samples.csv")  # per job: the figure's bands across seeds
    fig = budget_figure(across_seeds(curves, ["algo.lr"]), ["algo.lr"], "samples", colours)
    assert sorted(t.removesuffix(" (reference)") for t in titles(fig)) == sorted(RATES)


@pytest.mark.heavy  # builds a report
def test_two_arms_keep_their_curves_on_one_axis(tmp_path):
    rates = RATES[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = build_report(sweep(tmp_path / "sweep", rates)).parent
    assert 2 <= MANY_ARMS
    bands = pd.read_csv(out / "tables" / "heldout.csv")
    fig = heldout_figure(bands, ["algo.lr"])
    assert len(fig.axes) == len(bands[["metric", "k"]].drop_duplicates())  # a panel per metric, both arms on it
    assert all(len(ax.get_lines()) == 2 and not reference_drawn(ax) for ax in fig.axes)
    fig = at_k_figure(pd.read_csv(out / "tables" / "at_k.csv"), ["algo.lr"])
    assert all(len(ax.get_lines()) >= 2 for ax in fig.axes)  # both arms' finals (and the base) on each panel
    assert all(png_size(p)[0] <= MAX_WIDTH_PX for p in (out / "figures").glob("*.png"))


def test_the_committed_seventeen_arm_ties_figure_wraps_its_difficulties(tmp_path):
    """reports/tie_learning's ties by difficulty was 3,710 px wide: 68 bars on one axis."""
    table = pd.read_csv(ROOT / "reports" / "tie_learning" / "tables" / "ties_by_difficulty.csv")
    drawn = ties.ties_by_difficulty(table, tmp_path / "ties.png", ["group_size", "arm"])
    width, height = png_size(drawn)
    assert width <= MAX_WIDTH_PX and height > 1.5 * 804  # wrapped onto a second row, not squeezed into one


def test_a_forest_of_long_arm_names_stays_within_the_cap(tmp_path):
    long = [f"sampler=resample_on_tie_variant_{i}, algo.lr=0.0001" for i in range(3)]
    rows = [{"metric": metric, "a": long[0], "b": b, "difference": 0.01, "ci_low": -0.01, "ci_high": 0.03,
             "p_holm": 0.5, "family": 4} for metric in ("held-out pass@1", "wasted_frac") for b in long[1:]]
    drawn = intervals.forest(pd.DataFrame(rows), tmp_path / "differences.png", detectable=[False] * len(rows))
    assert png_size(drawn)[0] <= MAX_WIDTH_PX
    assert short_label(long[0]) == long[0]  # two keys: the pair labels are the whole names


@pytest.mark.heavy  # builds a report
def test_seventeen_arms_keep_the_first_screen_and_the_verdict(many):
    """The Findings of 17 arms fit their 250 words with no bullet over 60; the verdict table has a row an arm and
    its figure one row an arm per panel, within the cap."""
    from analysis.sections.findings import MAX_BULLET_WORDS, MAX_WORDS, words

    out, _ = many
    text = (out / "REPORT.md").read_text()
    findings = text[text.index("## Findings"):text.index("## Verdict")]
    assert words(findings) <= MAX_WORDS
    assert all(words(line) <= MAX_BULLET_WORDS for line in findings.splitlines())
    assert len(pd.read_csv(out / "tables" / "verdict.csv")) == len(RATES)
    assert png_size(out / "figures" / "verdict.png")[0] <= MAX_WIDTH_PX
    assert "(figures/verdict.png)" in text
