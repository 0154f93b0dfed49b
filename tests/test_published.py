"""A published table read beside a study (analysis/measures/published.py, the section "Against a published study").
Against a generated sweep whose answer is known (dynamic's held-out pass rates 0.25 above fixed's, band's 0.25
below, resample_on_tie's equal, seed by seed over 8 paired seeds), a published table with an arm that agrees, one
that disagrees, one with no counterpart here and one whose counterpart was not run: the rows recounted by hand from
the raw eval parts, a bad file refused in one line naming its key, and the default found in the sweep's
multirun.yaml or the project's conf/experiment/<name>.yaml."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from reference import ROOT, raw
from scipy import stats

from analysis.data.config import report_published
from analysis.measures.published import (
    LEANS,
    NONE_HERE,
    NONE_THERE,
    NOT_RUN,
    OPPOSITE,
    SAME,
    PublishedUnreadable,
    agreement,
    read_published,
    rows,
)
from analysis.report import build_report
from analysis.sections.published import answer
from fixtures.synthetic import held_out_shift_sweep

SHIFTS = {"dynamic": 0.25, "band": -0.25}  # resample_on_tie scores as fixed does, seed by seed
SAMPLERS = ("fixed", "resample_on_tie", "dynamic", "band")
SEEDS = range(8)  # paired; 6 pairs: Holm's floor 6 x 2/2^8 = 0.047 < 0.05, so a pair all seeds agree on resolves

PUBLISHED = {
    "name": "a test study",
    "source": {"url": "https://example.org/issue/1", "author": "someone", "date": "2026-01-02", "round": 2},
    "measure": "score at step 100", "alignment": "equal steps: 100 each", "matches": "equal updates",
    "tokens_measure": "tokens generated", "seeds": 1, "baseline": "naive",
    "arms": [
        {"theirs": "naive", "ours": "fixed", "score": 0.40, "tokens": 100},
        {"theirs": "up", "ours": "dynamic", "score": 0.45, "tokens": 150},  # above naive, as dynamic is here
        {"theirs": "down", "ours": "sampler=band", "score": 0.47, "tokens": 80},  # above naive; band is below here
        {"theirs": "solo", "ours": None, "score": 0.30, "note": "nothing like it here"},
        {"theirs": "ghost", "ours": "pods", "score": 0.50},  # mapped to an arm this study did not run
    ],
    "settings": {"model": "Big-1B", "updates": "100 steps", "batch": "64 x 8", "seeds": "1"},
}


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sweep, its experiment naming the published file (as multirun.yaml keeps it), and its report."""
    tmp = tmp_path_factory.mktemp("published")
    file = write(tmp / "published.yaml", PUBLISHED)
    callbacks = {"report": {"_target_": "experiments.callbacks.SweepReport", "published": str(file)}}
    root = held_out_shift_sweep(tmp / "sweep", SAMPLERS, SEEDS, 0.0, max_steps=6, callbacks=callbacks,
                                shifts=SHIFTS)
    report = build_report(root)
    return root, report, pd.read_csv(report.parent / "tables" / "published.csv")


def per_seed_scores(root: Path) -> pd.DataFrame:
    """By hand from the raw eval parts: each job's held-out pass@1 at its last checkpoint (the mean over its held-out
    prompts of each prompt's share correct), indexed by (sampler, seed)."""
    rows = raw(root, "eval")
    out = []
    for job, part in rows.groupby("job"):
        cfg = yaml.safe_load((root / job / ".hydra" / "config.yaml").read_text())
        last = part[part["step"] == part["step"].max()]
        out.append({"sampler": cfg["sampler"]["name"], "seed": cfg["seed"],
                    "score": last.groupby("prompt_id")["correct"].mean().mean()})
    return pd.DataFrame(out).set_index(["sampler", "seed"])["score"]


def by_hand(scores: pd.Series, arm: str) -> tuple[float, float, float]:
    """arm − fixed over the paired seeds: the mean difference and Student's t 95% interval."""
    diffs = (scores[arm] - scores["fixed"]).to_numpy()
    half = stats.t.ppf(0.975, len(diffs) - 1) * diffs.std(ddof=1) / np.sqrt(len(diffs))
    return diffs.mean(), diffs.mean() - half, diffs.mean() + half


def test_rows_recount_by_hand(built):
    root, _, table = built
    scores = per_seed_scores(root)
    rows = table.set_index("their_arm", drop=False)
    # one alignment here (each job's end, 6 steps), so one row an arm
    assert table["their_arm"].dropna().is_unique
    up, down = rows.loc["up"], rows.loc["down"]
    for row, arm in ((up, "dynamic"), (down, "band")):
        mean, low, high = by_hand(scores, arm)
        assert (row["difference"], row["ci_low"], row["ci_high"]) == pytest.approx((mean, low, high))
        assert row["resolved"]
    assert up["difference"] > 0.1 and down["difference"] < -0.1  # the premise: the shifts came through
    assert (up["agrees"], down["agrees"]) == (SAME, OPPOSITE)
    assert (up["our_arm"], down["our_arm"]) == ("dynamic", "band")  # named by value or by label alike
    # theirs: score − baseline's, tokens as a ratio of its, never resolved (one seed: no test), said on each row
    assert (up["their_difference"], up["their_tokens_ratio"]) == pytest.approx((0.05, 1.5))
    assert (down["their_difference"], down["their_tokens_ratio"]) == pytest.approx((0.07, 0.8))
    assert set(table["their_resolved"].dropna()) == {"no: 1 seed, no test"}
    assert table["their_resolved"].notna().sum() == 5
    solo, ghost = rows.loc["solo"], rows.loc["ghost"]
    assert (solo["agrees"], pd.isna(solo["difference"]), solo["note"]) == (NONE_HERE, True, "nothing like it here")
    assert np.isnan(solo["their_tokens_ratio"]) and solo["their_difference"] == pytest.approx(-0.10)
    assert (ghost["agrees"], ghost["our_arm"]) == (NOT_RUN, "pods")
    assert rows.loc["naive", "agrees"] == "baseline"
    # an arm of ours the file does not name: its own difference, no published one
    extra = table[table["their_arm"].isna()].squeeze()
    assert (extra["our_arm"], extra["agrees"]) == ("resample_on_tie", NONE_THERE)
    assert extra["difference"] == pytest.approx(by_hand(scores, "resample_on_tie")[0]) and extra["difference"] == 0


def test_the_section_answers_first_from_the_rows(built):
    _, report, _ = built
    text = report.read_text()
    section = text[text.index("## Against a published study: a test study"):]
    section = section[:section.index("\n## ", 1)]
    answer = section.split("\n\n")[1]
    # every job ended at 6 updates: the verdict names the end "equal updates", theirs, and so do the rows
    assert answer.startswith("**2 of the 4 arms of a test study have a counterpart here**, each measured from naive "
                             "there and fixed here: at equal updates (their alignment; each job's end) 1 points their "
                             "way and 1 the other way, of which 1 and 1 resolved here. ")
    assert "Theirs is one seed an arm: with no test, none of their differences (-0.100 to +0.100) can be resolved" \
        in answer
    assert "Settings (last table): Big-1B there against the built-in tiny model here; 100 steps there against" in answer
    assert len(answer.split()) < 120  # a reader finishes it
    settings = pd.read_csv(report.parent / "tables" / "published_settings.csv").set_index("setting")
    assert settings.loc["prompts x samples a step", "here"] == "10 x 8"
    assert settings.loc["seeds", "here"] == "8 an arm"
    assert settings.loc["model", "theirs"] == "Big-1B"
    assert "[someone, 2026-01-02, round 2](https://example.org/issue/1)" in section


def test_where_their_alignment_is_not_here_the_answer_says_so_and_counts_at_the_others(built):
    _, report, _ = built
    tests = pd.read_csv(report.parent / "tables" / "tests.csv")
    table = rows(read_published(report.parent.parent.parent / "published.yaml"), tests,
                 {"held-out pass@1": ("equal samples", "end of budget")})
    assert set(table["alignment"].dropna()) == {"equal samples"}
    text = answer(read_published(report.parent.parent.parent / "published.yaml"), table,
                  pd.DataFrame(columns=["setting", "theirs", "here"]), "fixed")
    assert ": this study has no comparison at equal updates (theirs); at equal samples (end of budget) 1 points " \
        "their way and 1 the other way, of which 1 and 1 resolved here. Theirs is one seed" in text


def test_agreement_leans_where_this_study_resolves_nothing():
    assert agreement(0.05, {"difference": 0.02, "resolved": False}) == LEANS[1]
    assert agreement(0.05, {"difference": -0.02, "resolved": False}) == LEANS[-1]
    assert agreement(-0.05, {"difference": -0.02, "resolved": True}) == SAME
    assert agreement(-0.05, {"difference": 1e-17, "resolved": False}) == LEANS[0]  # a float's noise leans no way
    assert agreement(0.0, {"difference": 0.3, "resolved": True}) == "no sign there"


@pytest.mark.parametrize("change, key", [
    (lambda d: d.pop("baseline"), "baseline: missing"),
    (lambda d: d.update(baseline="nobody"), "baseline: 'nobody' is no arm's `theirs`"),
    (lambda d: d["arms"][0].update(ours=None), "baseline: its arm 'naive' needs `ours`"),
    (lambda d: d["arms"][2].update(score="high"), "arms[2].score: must be a number, got 'high'"),
    (lambda d: d["arms"][1].update(colour="red"), "arms[1].colour: unknown key"),
    (lambda d: d["arms"].append({"theirs": "up", "score": 0.1}), "arms[5].theirs: 'up' is listed twice"),
    (lambda d: d.update(matches="equal steps"), "matches: 'equal steps': must be one of"),
    (lambda d: d.update(seeds=0), "seeds: must be a whole number of at least 1"),
    (lambda d: d["source"].pop("url"), "source.url: missing"),
    (lambda d: d["settings"].update(gpus="64"), "settings.gpus: unknown key (allowed: model, trainer"),
    (lambda d: d.update(extra=1), "extra: unknown key"),
])
def test_a_bad_file_is_one_line_naming_its_key(tmp_path, change, key):
    data = yaml.safe_load(yaml.safe_dump(PUBLISHED))
    change(data)
    path = write(tmp_path / "bad.yaml", data)
    with pytest.raises(PublishedUnreadable) as err:
        read_published(path)
    assert str(err.value).startswith(f"{path}: {key}") and "\n" not in str(err.value)


def test_a_file_that_is_not_yaml_or_runs_code_is_refused(tmp_path):
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(PublishedUnreadable, match=r"broken.yaml: not YAML .* at line 2"):
        read_published(tmp_path / "broken.yaml")
    (tmp_path / "code.yaml").write_text("!!python/object/apply:os.system ['true']\n")  # safe_load refuses the tag
    with pytest.raises(PublishedUnreadable, match="code.yaml: not YAML"):
        read_published(tmp_path / "code.yaml")
    with pytest.raises(PublishedUnreadable, match="missing.yaml: no such file"):
        read_published(tmp_path / "missing.yaml")


def test_the_command_line_reads_it_as_given_and_refuses_a_bad_one_before_writing(tmp_path):
    root = held_out_shift_sweep(tmp_path / "plain", ("fixed", "dynamic"), range(2), 0.25, max_steps=4)
    bad = write(tmp_path / "bad.yaml", {**PUBLISHED, "seeds": "one"})
    out = subprocess.run([sys.executable, "-m", "analysis", str(root), "--published", str(bad)], text=True,
                         capture_output=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "bad.yaml: seeds:" in out.stderr
    assert not (root / "report").exists()  # refused before anything was written
    good = write(tmp_path / "good.yaml", PUBLISHED)
    out = subprocess.run([sys.executable, "-m", "analysis", str(root), "--published", str(good)], text=True,
                         capture_output=True, env={**os.environ, "GRPO_LAB_REPORT_PROCESSES": "1"})
    assert out.returncode == 0, out.stderr
    assert "## Against a published study: a test study" in (root / "report" / "REPORT.md").read_text()


def hydra_record(root: Path, hydra: dict) -> Path:
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    return root


def test_the_default_is_the_sweeps_else_its_experiments_as_the_project_names_it_now(tmp_path):
    project = tmp_path / "project"
    (project / "conf" / "experiment").mkdir(parents=True)
    (project / "conf" / "experiment" / "curricula.yaml").write_text(
        "# @package _global_\nseed: 0\nhydra:\n  callbacks:\n    report:\n      published: published/x.yaml\n")
    chose = {"overrides": {"task": ["experiment=curricula", "seed=0,1"]}}
    # launched before the key existed: the experiment's file as it is now
    assert report_published(hydra_record(tmp_path / "old", chose), project) == "published/x.yaml"
    # the sweep's own record wins
    kept = {**chose, "callbacks": {"report": {"_target_": "x", "published": "published/y.yaml"}}}
    assert report_published(hydra_record(tmp_path / "new", kept), project) == "published/y.yaml"
    # no experiment chosen, one that is not there, or one outside conf/experiment: none
    assert report_published(hydra_record(tmp_path / "none", {"overrides": {"task": ["seed=0"]}}), project) is None
    assert report_published(hydra_record(tmp_path / "gone", {"overrides": {"task": ["experiment=gone"]}}),
                            project) is None
    (project / "conf" / "outside.yaml").write_text((project / "conf" / "experiment" / "curricula.yaml").read_text())
    assert report_published(hydra_record(tmp_path / "up", {"overrides": {"task": ["experiment=../outside"]}}),
                            project) is None
    assert report_published(tmp_path / "project", project) is None  # no Hydra record at all


def test_the_committed_marin_table_reads_as_published():
    table = read_published(ROOT / "analysis" / "published" / "marin_8765.yaml")
    assert (table.baseline, table.seeds, table.matches) == ("naive", 1, "equal updates")
    assert table.source["url"] == "https://github.com/marin-community/marin/issues/8765"
    scores = {a.theirs: (a.ours, a.score, a.tokens) for a in table.arms}
    assert scores == {"naive": ("grpo", 0.362, 203e6), "thompson": ("thompson_bins", 0.350, 149e6),
                      "learnability": ("learnability", 0.418, 220e6), "grade-adaptive": (None, 0.346, 130e6),
                      "grade-prior (directional)": (None, 0.408, 211e6), "naive-dapo": ("dynamic", 0.414, 190e6),
                      "thompson-dapo": (None, 0.434, 205e6)}
    note = table.arm("learnability").note
    assert "p(1 - p)" in note and "1 - p^G - (1 - p)^G" in note
