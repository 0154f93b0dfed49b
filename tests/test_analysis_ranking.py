"""Rankings of many arms: against a sweep whose answer is known, a recount from the raw tables,
the rule that turns tests into resolved orderings, and the coverage of each arm's interval."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from reference import both_pages, in_words

from analysis.measures.ranking import INFORMATIVE, PASS1, pass1_by_arm, rank
from analysis.measures.scores import seed_scores
from analysis.report import build_report
from analysis.sections.ranking import power
from fixtures.synthetic import (
    held_out_shift_sweep,
)

SAMPLERS = ("fixed", "resample_on_tie", "dynamic")
SEEDS = range(8)  # paired: the sign-flip floor 2/2^8 = 0.0078 is under Holm's first bar over 3 pairs, 0.0167
BETTER = 0.25  # dynamic's held-out pass rates are this much higher; the other two share theirs exactly


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Three samplers x 8 seeds. Eval rows are drawn from the prompts' pass rates with the seed's random
    numbers, so fixed and resample_on_tie score identically seed by seed and dynamic scores higher on
    every seed: the one true ordering is dynamic above both, the other pair tied."""
    root = held_out_shift_sweep(tmp_path_factory.mktemp("ranking") / "sweep", SAMPLERS, SEEDS, BETTER)
    return root, build_report(root)


def test_the_known_ordering_is_resolved_and_nothing_else(sweep):
    root, report = sweep
    table = pd.read_csv(report.parent / "tables" / "ranking_pass1.csv")
    assert table["arm"].iloc[0] == "sampler=dynamic" and table["ranks"].iloc[0] == "1"
    assert set(table["ranks"].iloc[1:]) == {"2–3"}  # the tied pair: neither place is claimed
    assert set(table["above"].iloc[0].split(", ")) == {"fixed", "resample_on_tie"}
    text = both_pages(report)
    findings = "\n".join(in_words(report))
    assert ("Resolved: 2 of 3 pairs, all but fixed vs resample_on_tie; in order of the means, "
            "dynamic > fixed ~ resample_on_tie ('>' resolved, '~' not)." in findings)
    assert "## Ranking" in text and "(figures/ranking.png)" in text \
        and (report.parent / "figures" / "ranking.png").exists()
    # every job ran its 8 steps, an update each: the last checkpoints are at equal updates, and the ranking says so
    assert "Ranking on held-out pass@1 at the end of the budget, equal updates (mean [" in findings
    assert "Each arm at the end of its budget (equal updates), best first" in text and "equal samples" not in findings


def test_ranked_means_are_a_recount_of_the_raw_tables(sweep):
    root, report = sweep
    final, informative = {}, {}
    for job in range(len(SAMPLERS) * len(SEEDS)):
        sampler = SAMPLERS[job // len(SEEDS)]
        eval = pq.read_table(root / str(job) / "eval").to_pandas()
        final.setdefault(sampler, []).append(eval[eval["step"] == eval["step"].max()]["correct"].mean())
        groups = pq.read_table(root / str(job) / "groups").to_pandas()
        informative.setdefault(sampler, []).append(1000 * groups["n_informative"].sum() / groups["group_size"].sum())
    for name, recount in (("pass1", final), ("informative", informative)):
        table = pd.read_csv(report.parent / "tables" / f"ranking_{name}.csv").set_index("arm")
        for sampler, values in recount.items():  # every prompt has n = 8 samples: pass@1 is the mean correct
            assert table.loc[f"sampler={sampler}", "mean"] == pytest.approx(np.mean(values))
            assert table.loc[f"sampler={sampler}", "ci_low"] <= np.mean(values) <= table.loc[f"sampler={sampler}",
                                                                                             "ci_high"]
        assert table["mean"].is_monotonic_decreasing


def test_rank_turns_resolved_pairs_into_rank_ranges():
    arms = ["s=a", "s=b", "s=c", "s=d"]
    by_arm = pd.DataFrame({"arm": arms, "seeds": 12, "mean": [0.30, 0.50, 0.40, 0.45], "ci_low": 0.0, "ci_high": 1.0})

    def row(a, b, difference, detectable):
        ci = (difference / 2, difference * 2) if detectable else (-1.0, 1.0)
        return {"metric": "wasted_frac", "a": a, "b": b, "difference": difference, "ci_low": min(ci),
                "ci_high": max(ci), "p_holm": 0.01 if detectable else 0.5, "seeds_a": 12, "seeds_b": 12,
                "smallest_p": 2 / 2**12}
    # wasted_frac: lower is better, so b − a = −0.2 puts b above a on informative samples
    tests = pd.DataFrame([row("s=a", "s=b", -0.2, True), row("s=a", "s=c", -0.1, True),
                          row("s=a", "s=d", -0.1, False), row("s=b", "s=c", 0.1, False),
                          row("s=b", "s=d", 0.05, False), row("s=c", "s=d", -0.05, False)])
    r = rank(INFORMATIVE, by_arm, tests)
    assert r.table["arm"].tolist() == ["s=b", "s=d", "s=c", "s=a"]
    assert r.table["ranks"].tolist() == ["1–3", "1–4", "1–3", "3–4"]  # a is below two arms, b and c above one
    assert sorted(r.resolved) == [("s=b", "s=a"), ("s=c", "s=a")] and r.pairs == 6
    assert "0.0083" in power(r) and "can be resolved only where nearly every seed agrees" in power(r)
    few = tests.assign(metric="held-out pass@1", seeds_a=7, seeds_b=7, smallest_p=2 / 2**7)  # 0.0156 > 0.0083
    assert "with 7 seeds a side" in power(rank(PASS1, by_arm, few))
    assert "no ordering can be resolved with these seeds" in power(rank(PASS1, by_arm, few))


def test_an_arms_pass1_interval_covers_its_mean_on_these_prompts_about_as_stated():
    """30 held-out prompts with fixed pass rates; each of 8 seeds (trained models) shifts them all by
    its own N(0, 0.03) and answers 16 times a prompt. The population mean over trained models, on these
    prompts, is the mean pass rate; Student's t over the 8 seeds covers it at about 95% (a percentile
    bootstrap of 8 seeds covered 87% of these runs)."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0.2, 0.8, 30)  # away from 0 and 1, so a shift is never clipped
    prompt = np.repeat(np.arange(30), 16)
    hits = []
    for _ in range(200):
        shift = rng.normal(0, 0.03, 8)
        rows = [pd.DataFrame({"job": str(seed), "seed": seed, "sampler": "fixed", "step": 10,
                              "prompt_id": prompt, "difficulty": "1",
                              "correct": rng.random(len(prompt)) < p[prompt] + shift[seed]})
                for seed in range(8)]
        eval = pd.concat(rows, ignore_index=True).assign(answer="A", samples_total=100)
        row = pass1_by_arm(seed_scores(eval, ["sampler"], [("pass@k", 1)]), ["sampler"]).iloc[0]
        hits.append(row["ci_low"] <= p.mean() <= row["ci_high"])
    assert 0.92 <= np.mean(hits) <= 0.98


def _tables(text: str) -> list[list[str]]:
    blocks, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            blocks, block = blocks + [block], []
    return blocks


@pytest.mark.parametrize("name", ["generated", "tie_learning"])
def test_long_tables_move_to_the_second_page_whole(sweep, name):
    """REPORT.md keeps its length at any number of arms: a table of more than MAX_ROWS rows is on DETAILS.md,
    whole, under the heading its link names (GitHub's anchor for it), and the first page keeps a line. The
    generated 3-arm sweep's first page has none that long; the committed 17-arm study's has several."""
    from analysis.render.paging import MAX_LINES, MAX_ROWS, anchor

    committed = Path(__file__).resolve().parent.parent / "reports" / name / "REPORT.md"
    report = sweep[1] if name == "generated" else committed
    text, details = report.read_text(), (report.parent / "DETAILS.md").read_text()
    assert all(len(block) - 2 <= MAX_ROWS for block in _tables(text)) and text.count("\n") < MAX_LINES
    links = re.findall(r"A table of (\d+) rows, too long for this page: "
                       r"\[DETAILS\.md, ([^\]]+)\]\(DETAILS\.md#([^)]+)\)",
                       text)
    assert bool(links) == (name == "tie_learning")  # 136 pairs of arms: tables longer than the limit
    for rows, title, link in links:
        assert link == anchor(title)
        moved = _tables(details.split(f"\n### {title}\n\n", 1)[1])[0]
        assert len(moved) - 2 == int(rows)  # whole (a shorter one moves too while the page is over its lines)
    assert not links or max(int(rows) for rows, _, _ in links) > MAX_ROWS


def test_anchors_are_githubs():
    from analysis.render.paging import anchor

    assert anchor("Coverage after RL: table 2") == "coverage-after-rl-table-2"
    assert anchor("held-out pass@1") == "held-out-pass1"
    assert anchor("Arms compared at equal samples: the table") == "arms-compared-at-equal-samples-the-table"


def test_an_ordering_every_difficulty_reverses_is_said_where_no_other_reversal_is():
    """Simpson's reversal: `good` wastes less at every difficulty but spends its samples where waste is high, so it
    wastes more pooled. Its resolved ordering (the pooled one) says the reversal in words, even where the orderings'
    `reversal` column held no words before (all NaN: read as floats)."""
    from analysis.measures.ranking import Ranking
    from analysis.sections.ranking import within_difficulty

    by_difficulty = pd.DataFrame({"arm": ["good", "good", "bad", "bad"], "difficulty": ["1", "2", "1", "2"],
                                  "wasted_frac": [0.1, 0.8, 0.2, 0.9], "samples": [100, 900, 900, 100]})
    orderings = pd.DataFrame({"better": ["bad"], "worse": ["good"], "difference": [0.5], "reversal": [np.nan]})
    r = Ranking(INFORMATIVE, pd.DataFrame(), [("bad", "good")], 1, 4, 0.125, orderings)
    said = within_difficulty(r, by_difficulty)
    assert said.at[0, "reversal"] == "reversed within every difficulty"
    assert pd.isna(within_difficulty(r, by_difficulty.assign(samples=500)).at[0, "reversal"])  # no reversal
