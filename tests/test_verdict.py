"""The verdict table and its figure: the letter display against its definition on random graphs, the table recounted
from the raw eval parts of a sweep whose ordering is known at each alignment, and the figure's size with many arms.

The sweep: three arms drawing 8, 4 or 2 prompts a step to one sample budget (16, 32, 64 steps, an update each), the
held-out model improving with each update. At equal samples and at equal tokens the arm of more updates wins, every
ordering resolved (8 paired seeds: the exact test reaches 2/2^8, under Holm's first bar over 3 pairs); at equal
updates the arms are one model, nothing resolved."""

from __future__ import annotations

import re
import struct
import warnings
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.stats.letters import compact_letters

SEEDS = 8
SIZES = (8, 4, 2)  # prompts a step; steps to the budget: 16, 32, 64
STEPS = {8: 16, 4: 32, 2: 64}
EVERY_TOKENS = 2000


def _letters(text: str) -> set[str]:
    """The letters of one arm's display ("ab'c": a, b', c)."""
    return set(re.findall(r"[a-zA-Z]'*", text))


@st.composite
def graphs(draw):
    """Arms (best first) and a random set of resolved pairs among them, up to 20 arms."""
    n = draw(st.integers(1, 20))
    arms = [f"arm{i}" for i in range(n)]
    pairs = list(combinations(arms, 2))
    density = draw(st.floats(0, 1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    keep = rng.random(len(pairs)) < density
    resolved = [pair if rng.random() < 0.5 else pair[::-1] for pair, k in zip(pairs, keep) if k]
    return arms, resolved


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_two_arms_share_a_letter_exactly_when_their_pair_is_not_resolved(graph):
    arms, resolved = graph
    letters = compact_letters(arms, resolved)
    assert list(letters) == arms and all(letters.values())  # every arm has a letter
    assert "a" in _letters(letters[arms[0]])  # the best arm has "a"
    apart = {frozenset(pair) for pair in resolved}
    for x, y in combinations(arms, 2):
        assert bool(_letters(letters[x]) & _letters(letters[y])) == (frozenset((x, y)) not in apart), (x, y)
    # letters appear in order down the table: each arm's new letters come next in the alphabet
    seen: list[str] = []
    for arm in arms:
        seen += sorted(_letters(letters[arm]) - set(seen), key=lambda s: (len(s), s.lower() != s, s.lower()))
    symbols = [chr(ord("a") + i) for i in range(26)] + [chr(ord("A") + i) for i in range(26)]
    assert seen == [s + "'" * primes for primes in range(5) for s in symbols][:len(seen)]
    # no letter is redundant: each covers some arm or pair that no other letter covers
    for letter in set(seen):
        holders = [a for a in arms if letter in _letters(letters[a])]
        others = {a: _letters(letters[a]) - {letter} for a in holders}
        assert any(not others[x] & others[y] for x, y in combinations(holders, 2)) or \
            any(not others[a] for a in holders), letter
    # deterministic, whatever order the pairs come in
    assert compact_letters(arms, list(reversed(resolved))) == letters


def test_letters_of_small_cases_read_as_the_textbook_display():
    assert compact_letters(["A", "B", "C"], []) == {"A": "a", "B": "a", "C": "a"}
    assert compact_letters(["A", "B", "C"], [("A", "B"), ("A", "C"), ("B", "C")]) == {"A": "a", "B": "b", "C": "c"}
    assert compact_letters(list("ABCDE"), [("A", "C"), ("A", "D"), ("A", "E"), ("B", "E")]) == \
        {"A": "a", "B": "ab", "C": "bc", "D": "bc", "E": "c"}
    assert compact_letters([], []) == {}
    with pytest.raises(ValueError, match="not one of the arms"):
        compact_letters(["A", "B"], [("A", "Z")])


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The sweep's tables as the report prepares them, the tests' family of its held-out comparisons, and the
    verdict section made from them (not yet a part of the report: called as the report would)."""
    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    configs = [job_config("fixed", group_size=8, seed=seed, max_steps=64, prompts_per_step=size)
               for size in SIZES for seed in range(SEEDS)]
    for cfg in configs:
        cfg["eval"]["every_tokens"] = EVERY_TOKENS
    root = write_sweep(tmp_path_factory.mktemp("verdict") / "sweep", configs,
                       prompt_pool(levels=("1", "2"), per_level=16),
                       eval_prompts=prompt_pool(levels=("1", "2"), per_level=16, seed=3), eval_n=4, eval_every=4,
                       eval_learn=0.04, stop_steps=[STEPS[size] for size in SIZES for _ in range(SEEDS)])
    return root, *_made(root)


def _made(root: Path, where: tuple[str, ...] = (), baseline: str | None = None):
    from analysis.data.load import load
    from analysis.parts import held_out_sections
    from analysis.report import COLUMNS, _prepared
    from analysis.sections import significance, verdict
    from analysis.sections.section import Context

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tables, arm = _prepared(load(root, tables=("groups", "eval", "steps"), columns=COLUMNS), ((), where, baseline))
        ctx = Context(root=root, out=root / "report", arm=tuple(arm), names={})
        held, _ = held_out_sections(tables, ctx)
        family = significance.family([held.comparisons])
        return family, verdict.section(tables, ctx, family, held.scores, held.prompt_scores)


def _raw(root: Path) -> pd.DataFrame:
    """Every job's eval rows straight from its parts, with its prompts a step."""
    import yaml

    rows = []
    for job in sorted(p for p in root.iterdir() if (p / "run.json").exists()):
        size = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())["prompts_per_step"]
        eval = pq.read_table(job / "eval").to_pandas()
        rows.append(eval.assign(job=job.name, arm=f"prompts_per_step={size}"))
    return pd.concat(rows, ignore_index=True)


def _recount(raw: pd.DataFrame, pick) -> pd.DataFrame:
    """Per arm: the mean over its jobs of each job's mean correct (pass@1: every prompt has 4 samples) at the step
    `pick(job rows)` chooses, and the step, samples and tokens there (each step took one update)."""
    per_job = []
    for (arm, _), rows in raw.groupby(["arm", "job"]):
        step = pick(rows)
        at = rows[rows["step"] == step]
        per_job.append({"arm": arm, "mean": at["correct"].mean(), "updates": step,
                        "samples": at["samples_total"].iloc[0], "tokens": at["tokens_total"].iloc[0]})
    return pd.DataFrame(per_job).groupby("arm").mean()


def test_the_verdict_is_a_recount_of_the_raw_eval_parts_at_each_alignment(study):
    root, family, made = study
    raw = _raw(root)
    found = {a.name: a for a in made.alignments}
    assert list(found) == ["equal samples", "equal updates", "equal tokens"]
    # the equal-tokens point, from the parts: the largest multiple every job crossed at some evaluated step
    crossed = [set((rows.loc[rows["step"] > 0, "tokens_total"] // EVERY_TOKENS * EVERY_TOKENS).tolist())
               for _, rows in raw.groupby("job")]
    point = max(set.intersection(*crossed))
    assert found["equal tokens"].point == f"{point:,} tokens" and found["equal updates"].point == "16 updates"
    recounts = {"equal samples": _recount(raw, lambda rows: rows["step"].max()),
                "equal updates": _recount(raw, lambda rows: 16),
                "equal tokens": _recount(raw, lambda rows: rows.loc[rows["tokens_total"] >= point, "step"].min())}
    for name, recount in recounts.items():
        table = found[name].table.set_index("arm")
        assert table["seeds"].eq(SEEDS).all()
        for column in ("mean", "updates", "samples", "tokens"):
            assert table[column].to_numpy() == pytest.approx(recount.loc[table.index, column].to_numpy()), (name,
                                                                                                            column)
        assert (table["ci_low"] <= table["mean"]).all() and (table["mean"] <= table["ci_high"]).all()
        assert found[name].table["mean"].is_monotonic_decreasing
    # the known orderings: more updates wins at equal samples and tokens, every pair resolved; none at equal updates
    for name in ("equal samples", "equal tokens"):
        assert found[name].table["arm"].tolist() == [f"prompts_per_step={s}" for s in (2, 4, 8)]
        assert found[name].table["letters"].tolist() == ["a", "b", "c"] and found[name].pairs == 3
    assert found["equal updates"].resolved == [] and set(found["equal updates"].table["letters"]) == {"a"}


def test_letters_resources_and_differences_agree_with_the_tests_family(study):
    from analysis.stats.seeds import detectable

    _, family, made = study
    assert made.reference == "prompts_per_step=8"  # the sweep's first arm: `a` of its first comparison
    for alignment in made.alignments:
        rows = family[family["metric"] == alignment.metric]
        resolved = {frozenset((r["a"], r["b"])) for _, r in rows.iterrows() if detectable(r)}
        assert {frozenset(pair) for pair in alignment.resolved} == resolved
        letters = alignment.table.set_index("arm")["letters"]
        for _, row in rows.iterrows():
            shared = bool(set(letters[row["a"]]) & set(letters[row["b"]]))
            assert shared == (frozenset((row["a"], row["b"])) not in resolved)
            for resource in ("updates", "samples", "tokens"):  # each side's resources: the family row's own
                table = alignment.table.set_index("arm")[resource]
                assert table[row["a"]] == pytest.approx(row[f"{resource}_a"])
                assert table[row["b"]] == pytest.approx(row[f"{resource}_b"])
        differences = alignment.differences.set_index("arm")
        for _, row in rows[rows["a"] == made.reference].iterrows():
            assert differences.loc[row["b"], "difference"] == pytest.approx(row["difference"])
            assert differences.loc[row["b"], "resolved"] == detectable(row)


def test_the_section_shows_one_table_and_its_csv(study):
    _, _, made = study
    text = made.text
    assert text.startswith("## Verdict: held-out pass@1 at each alignment")
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(SIZES)
    assert table[0].startswith("| arm | equal samples (end of budget): pass@1 |  | updates | samples | tokens | "
                               "equal updates (16 updates): pass@1 |  | samples | tokens | equal tokens (")
    assert table[2].startswith("| 2 | ") and " | a | 64 | 1,024 | " in table[2]
    csv = made.files.csvs["verdict"]
    assert csv["arm"].tolist() == [f"prompts_per_step={s}" for s in (2, 4, 8)]
    assert "equal_updates_letters" in csv and "equal_tokens_tokens" in csv
    assert "verdict" not in made.files.figures  # three arms: the table says it all
    assert "Resolved: 3 of 3 pairs at equal samples, 0 of 3 pairs at equal updates, 3 of 3 pairs at equal tokens" \
        in text


def test_two_arms_are_a_study_and_the_reference_may_be_b(study):
    from analysis.measures.verdict import from_reference

    root, family, _ = study
    pair, made = _made(root, where=("prompts_per_step=4", "prompts_per_step=2"), baseline="prompts_per_step=2")
    assert made.reference == "prompts_per_step=2" and [a.pairs for a in made.alignments] == [1, 1, 1]
    rows = family[family["metric"] == "held-out pass@1"]  # the reference is `b` of every row naming it
    flipped = from_reference(rows, "prompts_per_step=2").set_index("arm")
    row = rows[(rows["a"] == "prompts_per_step=8") & (rows["b"] == "prompts_per_step=2")].iloc[0]
    assert flipped.loc["prompts_per_step=8", "difference"] == pytest.approx(-row["difference"])
    assert flipped.loc["prompts_per_step=8", "ci_low"] == pytest.approx(-row["ci_high"])
    assert flipped.loc["prompts_per_step=8", "ci_high"] == pytest.approx(-row["ci_low"])


def _alignment(name: str, arms: list[str], reference: str, rng: np.random.Generator):
    from analysis.measures.verdict import Alignment

    means = np.sort(rng.uniform(0.3, 0.7, len(arms)))[::-1]
    table = pd.DataFrame({"arm": arms, "seeds": 8, "mean": means, "ci_low": means - 0.05, "ci_high": means + 0.05,
                          "letters": "a", "updates": 40.0, "samples": 4096.0, "tokens": 65_000.0})
    others = [a for a in arms if a != reference]
    difference = rng.normal(0, 0.08, len(others))
    half = rng.uniform(0.02, 0.06, len(others))
    differences = pd.DataFrame({"arm": others, "difference": difference, "ci_low": difference - half,
                                "ci_high": difference + half, "p_holm": 0.01,
                                "resolved": np.abs(difference) > half})
    return Alignment(name=name, metric="held-out pass@1", point="end of budget", table=table, resolved=[],
                     pairs=len(arms) * (len(arms) - 1) // 2, differences=differences)


def test_the_figure_of_many_arms_fits_2000_px_with_a_row_per_arm_in_each_panel(tmp_path, monkeypatch):
    from analysis.render import verdict as figure

    rng = np.random.default_rng(0)
    arms = [f"sampler=resample_on_tie, algo.lr=0.000{i}, sampler.group_size={4 * i}" for i in range(1, 18)]
    found = [_alignment(name, arms, arms[0], rng) for name in ("equal samples", "equal updates", "equal tokens")]
    drawn: dict[int, list[float]] = {}
    real = figure.interval_row

    def counted(ax, y, *args, **kwargs):
        drawn.setdefault(id(ax), []).append(y)
        return real(ax, y, *args, **kwargs)

    monkeypatch.setattr(figure, "interval_row", counted)
    path = figure.differences_from_reference(found, tmp_path / "verdict.png", reference=arms[0])
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width <= 2000 and height <= 2000, (width, height)  # names of three keys: three lines a row
    assert len(drawn) == 3 and all(sorted(ys) == list(range(16)) for ys in drawn.values())


def test_a_wide_study_shows_its_best_20_arms_and_says_where_the_rest_are(tmp_path):
    from analysis.sections.verdict import verdict

    rng = np.random.default_rng(1)
    arms = [f"sampler.group_size={i}" for i in range(25)]
    found = [_alignment(name, arms, arms[0], rng) for name in ("equal samples", "equal updates")]
    made = verdict(found, arms[0])
    rows = [line for line in made.text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 20  # the header and the 20 best at equal samples
    best = found[0].table["arm"].str.split("=").str[1].tolist()[:20]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows[1:]] == best
    assert "5 more are in [tables/verdict.csv](tables/verdict.csv)" in made.text
    assert len(made.files.csvs["verdict"]) == 25
    path = made.files.figures["verdict"](tmp_path / "verdict.png")  # drawn as the report would draw it
    assert struct.unpack(">II", path.read_bytes()[16:24])[0] <= 2000


def test_holm_agrees_with_statsmodels():
    """The report's Holm adjustment is statsmodels' (`multipletests(method="holm")`), NaN left out of the family."""
    from statsmodels.stats.multitest import multipletests

    from analysis.stats.exact_tests import holm

    rng = np.random.default_rng(3)
    for size in (1, 2, 6, 21, 136):
        p = rng.uniform(0, 0.2, size) ** rng.uniform(0.5, 3)
        p[rng.random(size) < 0.1] = p[0]  # ties among the p-values
        assert np.allclose(holm(p), multipletests(p, method="holm")[1], rtol=0, atol=1e-15)
    gappy = np.array([0.01, np.nan, 0.04, 0.03])
    kept = ~np.isnan(gappy)
    assert np.isnan(holm(gappy)[1])
    assert np.allclose(holm(gappy)[kept], multipletests(gappy[kept], method="holm")[1])
