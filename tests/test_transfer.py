"""Transfer: a reference study's resolved orderings read in another study. Against generated sweeps whose
answer is known (a reference where dynamic beats both other samplers on every seed; studies where it wins again,
loses, or wins on too few seeds to resolve), the verdicts, the orientation of every difference and the recount
of this study's numbers from its own tests table."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from reference import both_pages, in_words

from analysis.measures.transfer import ReferenceUnreadable, orderings, read_reference
from analysis.report import build_report
from fixtures.synthetic import held_out_shift_sweep

SHIFT = 0.25  # dynamic's held-out pass rates are this much higher (lower where negative) than the others'


def sweep(root, samplers, seeds, shift, against=None):
    """A generated sweep whose held-out ordering is known (dynamic `shift` above the others, seed by seed);
    `against` goes where an experiment puts it."""
    callbacks = {"report": {"_target_": "experiments.callbacks.SweepReport", "against": str(against)}} \
        if against is not None else None
    return held_out_shift_sweep(root, samplers, seeds, shift, max_steps=6, callbacks=callbacks)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = sweep(tmp_path_factory.mktemp("transfer") / "tiny", ("fixed", "resample_on_tie", "dynamic"), range(8),
                 SHIFT)
    return build_report(root).parent


def study(tmp_path, reference, seeds, shift):
    root = sweep(tmp_path / "here", ("fixed", "dynamic"), seeds, shift, against=reference)
    report = build_report(root)
    return report, pd.read_csv(report.parent / "tables" / "transfer.csv")


def test_the_reference_orders_what_it_was_built_to(reference):
    """The premise: dynamic above both others, the other pair unordered."""
    tests = pd.read_csv(reference / "tables" / "tests.csv")
    pass1 = tests[tests["metric"] == "held-out pass@1"]
    ordered = {frozenset((a, b)) for a, b, p, lo, hi in pass1[["a", "b", "p_holm", "ci_low", "ci_high"]].itertuples(
        index=False) if p < 0.05 and (lo > 0 or hi < 0)}
    assert ordered == {frozenset(("sampler=fixed", "sampler=dynamic")),
                       frozenset(("sampler=resample_on_tie", "sampler=dynamic"))}


def test_an_ordering_that_holds_again_is_reproduced_and_recounts(tmp_path, reference):
    report, table = study(tmp_path, reference, range(8), SHIFT)
    row = table[table["metric"] == "held-out pass@1"].squeeze()
    assert row["verdict"] == "reproduced" and row["there"] == row["here"] == row["leans"]
    # this study's numbers are its own tests row, turned to the reference's orientation where it was taken the
    # other way round
    ours = pd.read_csv(report.parent / "tables" / "tests.csv")
    mine = ours[(ours["metric"] == "held-out pass@1")].squeeze()
    flip = (mine["a"], mine["b"]) != (f"sampler={row['a']}", f"sampler={row['b']}")
    sign = -1 if flip else 1
    assert row["difference"] == pytest.approx(sign * mine["difference"])
    assert sorted([row["ci_low"], row["ci_high"]]) == pytest.approx(sorted([sign * mine["ci_low"],
                                                                           sign * mine["ci_high"]]))
    assert row["p_value"] == pytest.approx(mine["p_value"])
    text = report.read_text()
    findings = "\n".join(in_words(report))
    assert "held-out pass@1: of its 1 resolved ordering among these arms, reproduced 1 (dynamic > fixed)" in findings
    assert "## Transfer from `" in text


def test_an_ordering_that_turns_is_reversed(tmp_path, reference):
    _, table = study(tmp_path, reference, range(8), -SHIFT)
    row = table[table["metric"] == "held-out pass@1"].squeeze()
    assert row["verdict"] == "reversed" and row["here"] != row["there"]


def test_too_few_seeds_leave_it_unresolved_and_say_which_way_it_leans(tmp_path, reference):
    """4 paired seeds: the exact test's floor is 0.125, so nothing is ordered however large the difference; the
    estimate still points the reference's way on every seed, and its interval alone excludes zero."""
    report, table = study(tmp_path, reference, range(4), SHIFT)
    row = table[table["metric"] == "held-out pass@1"].squeeze()
    assert row["verdict"] == "unresolved" and row["here"] == "none" and row["leans"] == row["there"]
    assert row["interval_only"] and row["p_value"] == pytest.approx(0.125)
    text = both_pages(report)  # the first page's Transfer section and each comparison in words
    assert "unresolved 1 (dynamic > fixed (leans the same way: " in text
    assert "the smallest p a pair can reach after Holm's correction is 0.125, at or above α = 0.05: no ordering can " \
        "be resolved here" in text
    assert row["smallest_p_holm"] == pytest.approx(0.125)


def test_the_command_line_reads_against_as_given_and_refuses_a_folder_without_tests(tmp_path, reference):
    root = sweep(tmp_path / "plain", ("fixed", "dynamic"), range(2), SHIFT)
    out = subprocess.run([sys.executable, "-m", "analysis", str(root), "--against", str(tmp_path)], text=True,
                         capture_output=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "tables/tests.csv" in out.stderr
    assert not (root / "report").exists()  # refused before anything was written
    out = subprocess.run([sys.executable, "-m", "analysis", str(root), "--against", str(reference)], text=True,
                         capture_output=True)
    assert out.returncode == 0, out.stderr
    assert (root / "report" / "tables" / "transfer.csv").is_file()


def test_pairs_match_whichever_way_round_and_unordered_pairs_are_named():
    """Hand-built tables: the reference took (x, y), this study (y, x); a pair only one study has is left out."""
    def row(metric, a, b, diff, low, high, p, higher, lower):
        return {"metric": metric, "a": a, "b": b, "difference": diff, "ci_low": low, "ci_high": high, "p_value": p,
                "p_holm": p, "b_higher": higher, "b_lower": lower}
    m = "held-out pass@1"
    there = pd.DataFrame([row(m, "x", "y", 0.1, 0.05, 0.15, 0.001, 8, 0), row(m, "x", "z", 0.0, -0.1, 0.1, 0.9, 4, 4),
                          row(m, "y", "w", 0.2, 0.1, 0.3, 0.001, 8, 0)])
    here = pd.DataFrame([row(m, "y", "x", -0.2, -0.3, -0.1, 0.01, 0, 6), row(m, "x", "z", 0.3, 0.2, 0.4, 0.01, 6, 0)])
    got = orderings(there, here, (m,)).set_index(["a", "b"])
    assert list(got.index) == [("x", "y"), ("x", "z")]
    xy = got.loc[("x", "y")]
    assert (xy["verdict"], xy["difference"], xy["ci_low"], xy["ci_high"], xy["b_higher"], xy["b_lower"]) == \
        ("reproduced", 0.2, 0.1, 0.3, 6, 0)
    assert got.loc[("x", "z"), "verdict"] == "new here"
    # an estimate of exactly zero leans no way, and an interval with a missing end excludes nothing
    here.loc[0, ["difference", "ci_low", "ci_high", "p_holm"]] = [0.0, 0.05, np.nan, 0.5]
    flat = orderings(there, here, (m,)).set_index(["a", "b"]).loc[("x", "y")]
    assert (flat["verdict"], flat["leans"], flat["interval_only"]) == ("unresolved", "none", False)


def test_a_tests_table_of_another_kind_is_refused_in_one_line(tmp_path):
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "tests.csv").write_text("metric,a,b\nm,x,y\n")
    with pytest.raises(ReferenceUnreadable, match="no column 'difference'"):
        read_reference(tmp_path)
