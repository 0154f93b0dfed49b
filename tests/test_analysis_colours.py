"""The figures of one report (analysis/render/): one colour per arm in every figure, made once per report
(`canvas.report_colours`), also in a figure that shows only some arms; a tie-fraction window holding few
groups drawn hollow and said so; a figure's p printed as the Findings print it.

The figures are read as matplotlib drew them: each render module's `save` is wrapped to keep the figure's
legend handles (their colours) and its artists before writing it as before."""

import re
import shutil
import warnings
from pathlib import Path

import matplotlib.colors as mcolors
import pandas as pd
import pytest
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.render import canvas, curves, intervals, scores, tie_learning, ties
from analysis.render.canvas import PALETTE, arm_colours, report_colours
from analysis.report import build_report
from analysis.sections.in_words import p_text
from fixtures.synthetic import job_config, prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent
# (sampler, group size, advantage rule), in the sweep's order: the report's order of arms. The ties figures tell
# arms apart by the group size drawn and the sampler first (sorted naturally: size 4 first, band before fixed),
# the others by the arm keys in the jobs' order, so a colour per figure's own order of arms would differ.
ARMS = [("fixed", 8, "grpo"), ("fixed", 8, "ngrpo"), ("resample_on_tie", 8, "grpo"), ("dynamic", 8, "grpo"),
        ("band", 8, "grpo"), ("fixed", 4, "grpo")]
COLOURED = {"budget_samples", "health", "heldout", "at_k", "tie_learning_shares", "ties_by_difficulty",
            "ties_over_samples"}  # every figure that colours arms


def _drawn(monkeypatch):
    """{figure name: Figure} of every figure the render modules save from now on (written as before)."""
    drawn = {}

    def keep(fig, path):
        drawn[Path(path).stem] = fig
        return canvas.save(fig, path)

    for module in (curves, scores, ties, tie_learning, intervals):
        monkeypatch.setattr(module, "save", keep)
    return drawn


def _colour(handle) -> str | None:
    if isinstance(handle, Line2D):
        return mcolors.to_hex(handle.get_color())
    if isinstance(handle, Patch):
        return mcolors.to_hex(handle.get_facecolor(), keep_alpha=False)
    return None


def _arm(label: str) -> tuple[str, int, str] | None:
    """The arm a legend label names, whichever keys the figure names it by (the group size drawn or the config
    key, with " (2 jobs)" or ", final (step 20)" after it); None for an entry that is no arm."""
    pairs = dict(re.findall(r"([\w.]+)=([^,( ]+)", label))
    if "sampler" not in pairs:
        return None
    return pairs["sampler"], int(pairs.get("sampler.group_size", pairs.get("group_size"))), pairs["algo.advantage"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A report of six arms, two seeds each, whose first arm has no eval tables: its held-out figures show five."""
    root = tmp_path_factory.mktemp("colours") / "sweep"
    prompts = prompt_pool(levels=("1", "2", "3", "4"), per_level=6)
    configs = []
    for sampler, size, rule in ARMS:
        for seed in (0, 1):
            cfg = job_config(sampler, group_size=size, seed=seed, max_steps=24, prompts_per_step=8,
                             eval_every_samples=600)
            cfg["algo"]["advantage"] = rule
            configs.append(cfg)
    stops = [24, 24, 24, 24, 20, 21, 19, 18, 24, 24, 24, 24]  # some arms stop part way through a ties window
    write_sweep(root, configs, prompts, eval_prompts=prompts, eval_n=8, stop_steps=stops)
    for job in (0, 1):
        shutil.rmtree(root / str(job) / "eval")
    with pytest.MonkeyPatch.context() as monkeypatch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setenv("GRPO_LAB_REPORT_PROCESSES", "1")  # every figure drawn here, where `save` is wrapped
        drawn = _drawn(monkeypatch)
        out = build_report(root).parent
    return out, drawn


def test_each_arm_has_one_colour_in_every_figure_in_the_reports_order(report):
    out, drawn = report
    assert COLOURED <= set(drawn), sorted(drawn)
    seen: dict[tuple, set] = {}
    shown: dict[str, set] = {}
    for name in COLOURED:
        legend = drawn[name].legends[0]
        for text, handle in zip(legend.get_texts(), legend.legend_handles):
            arm = _arm(text.get_text())
            if arm is not None:
                seen.setdefault(arm, set()).add((_colour(handle), name))
                shown.setdefault(name, set()).add(arm)
    colours = {arm: {colour for colour, _ in found} for arm, found in seen.items()}
    assert all(len(c) == 1 for c in colours.values()), {a: sorted(f) for a, f in seen.items() if len(colours[a]) > 1}
    # the report's order of arms (its jobs') gives the colours, whatever order a figure holds them in
    assert {arm: c.pop() for arm, c in colours.items()} == dict(zip(ARMS, PALETTE))
    # the first arm has no eval rows: the held-out figures show the other five, each in its own colour
    assert shown["heldout"] == shown["at_k"] == set(ARMS[1:])
    assert all(shown[name] == set(ARMS) for name in COLOURED - {"heldout", "at_k"})
    # the panels' lines are drawn in their legend's colours
    for line in drawn["ties_over_samples"].axes[0].get_lines():
        assert mcolors.to_hex(line.get_color()) in PALETTE[:len(ARMS)]


def test_report_colours_follow_the_jobs_and_name_every_arm():
    jobs = pd.DataFrame({"sampler": ["b", "a", "b", "c"], "algo.lr": [0.1, 0.1, 0.1, None]})
    colours = report_colours(jobs, ["sampler", "algo.lr"])
    assert colours == {"sampler=b, algo.lr=0.1": PALETTE[0], "sampler=a, algo.lr=0.1": PALETTE[1],
                       "sampler=c, algo.lr=null": PALETTE[2]}
    assert len(set(arm_colours(range(len(PALETTE))).values())) == len(PALETTE)  # 20 arms: 20 colours
    with pytest.raises(KeyError, match="no colour for arm 'sampler=d'"):
        canvas.arm_colour(colours, "sampler=d")


def test_a_partial_ties_window_is_hollow_off_the_line_and_the_caption_counts_it(report):
    out, drawn = report
    table = pd.read_csv(out / "tables" / "ties_by_step.csv")
    by = ["group_size", "sampler", "algo.advantage"]
    partial = ties.partial_windows(table, by)
    windows = table.loc[partial, [*by, "step_window"]].drop_duplicates()
    assert len(windows) and not partial.all()
    text = (out / "REPORT.md").read_text() + (out / "DETAILS.md").read_text()
    assert f"Hollow points: {len(windows)} windows of an arm holding fewer than half the groups" in text
    figure = drawn["ties_over_samples"]
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    assert ties.PARTIAL_LABEL in labels
    # in each panel, a hollow point at every partial window's x, and no line point there
    hollow = {round(x, 6) for ax in figure.axes for line in ax.get_lines() if line.get_markerfacecolor() == "white"
              and line.get_marker() == "o" for x in line.get_xdata()}
    filled = {round(x, 6) for ax in figure.axes for line in ax.get_lines() if line.get_linestyle() != "None"
              for x in line.get_xdata()}
    assert hollow == {round(x, 6) for x in table.loc[partial, "samples_drawn"]}
    assert not hollow & filled


def test_the_committed_smollm2_windows_that_end_a_run_are_partial():
    """reports/smollm2's last windows held 20 of 128 groups (resample_on_tie) and 56 (fixed): drawn as ordinary
    points, its lines ended at 0 or 1."""
    table = pd.read_csv(ROOT / "reports" / "smollm2" / "tables" / "ties_by_step.csv")
    partial = ties.partial_windows(table, ["group_size", "sampler"])
    found = table.loc[partial, ["sampler", "step_window"]].drop_duplicates()
    assert sorted(map(tuple, found.to_numpy().tolist())) == [("fixed", 144), ("resample_on_tie", 64)]


def test_a_figures_p_is_the_findings_p(tmp_path, monkeypatch):
    drawn = _drawn(monkeypatch)
    rows = pd.DataFrame([
        {"metric": "pass@1", "a": "sampler=x", "b": "sampler=y", "difference": 0.01, "ci_low": -0.01,
         "ci_high": 0.03, "p_holm": 0.125, "family": 1},
        {"metric": "wasted_frac", "a": "sampler=x", "b": "sampler=y", "difference": -0.1, "ci_low": -0.2,
         "ci_high": -0.01, "p_holm": 0.0234375, "family": 3},
    ])
    intervals.forest(rows, tmp_path / "differences.png", detectable=[False, True])
    notes = [t.get_text() for t in drawn["differences"].axes[0].texts]
    assert notes == ["p = 0.125", "Holm p = 0.0234"]
    for (_, row), note in zip(rows.iterrows(), notes):
        assert p_text(row).startswith(note)
