"""What the report of ingested runs says (issue 56): named difficulties in the order the logs give them (or
`--difficulty-order`), not alphabetically; no tie prediction from correct counts where the rewards are continuous;
a report of several sources titled by all of them; and no "at equal samples" where the arms' samples are 32x
apart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.ingest import IngestError, Reading, ingest
from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, simulate_groups
from fixtures.tool_logs import trl_export, verl_rows, write_verl

ROOT = Path(__file__).resolve().parent.parent
NAMED = ("easy", "medium", "hard")  # alphabetically easy, hard, medium
PROMPTS = prompt_pool(levels=NAMED, per_level=6)  # easy prompts first, then medium, then hard
READING = Reading(difficulty_from="level", correct_from="acc", tokens_from="response_length")


def report(sources, out: Path, **options) -> tuple[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = build_report(sources, out, **options)
    return path.read_text(), path.with_name("DETAILS.md").read_text()


def named_dump(folder: Path, steps: int = 4) -> Path:
    """A verl dump whose `level` names each prompt's difficulty, every prompt a step in the pool's order (easy
    first, hard last), its rows in that order."""
    rng = np.random.default_rng(5)
    return write_verl(folder, {s: verl_rows(PROMPTS, s, 4, rng, shuffle=False) for s in range(1, steps + 1)})


def difficulty_rows(text: str, heading: str) -> list[str]:
    """The difficulty column of the first markdown table after `heading`."""
    block = text[text.index(heading):]
    rows = [line for line in block.splitlines() if line.startswith("| ")][1:]
    end = next((i for i, line in enumerate(rows) if line.startswith("| difficulty")), len(rows))
    return [line.split("|")[1].strip() for line in rows[:end]]


def test_named_difficulties_keep_the_logs_order_or_the_one_given(tmp_path):
    dump = named_dump(tmp_path / "dump")
    run = ingest("verl", dump, tmp_path / "run", READING)
    assert json.loads((run / "run.json").read_text())["difficulty_order"] == list(NAMED)
    text, details = report(run, tmp_path / "report")
    assert difficulty_rows(text, "### First-round ties by difficulty") == list(NAMED)
    ties = pd.read_csv(tmp_path / "report" / "tables" / "ties_by_difficulty.csv")
    assert ties["difficulty"].tolist() == list(NAMED)
    sizes = pd.read_csv(tmp_path / "report" / "tables" / "group_size_best.csv")
    assert sizes["difficulty"].tolist() == [*NAMED, "all"]

    # the command line's order, word for word in run.json and the report
    again = subprocess.run([sys.executable, "-m", "analysis.ingest", "verl", str(dump), "--out", str(tmp_path / "r2"),
                            "--difficulty-from", "level", "--correct-from", "acc", "--tokens-from", "response_length",
                            "--difficulty-order", "hard,medium,easy"], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr
    record = json.loads((tmp_path / "r2" / "run.json").read_text())
    assert record["difficulty_order"] == ["hard", "medium", "easy"]
    assert record["imported"]["how"]["difficulty order"] == "--difficulty-order: hard, medium, easy"
    report(tmp_path / "r2", tmp_path / "report2")
    ties = pd.read_csv(tmp_path / "report2" / "tables" / "ties_by_difficulty.csv")
    assert ties["difficulty"].tolist() == ["hard", "medium", "easy"]
    from analysis.view.data import collect  # the viewer's filter and heatmap in the same order

    page = collect(tmp_path / "r2")
    assert page["difficulties"] == page["heat"]["difficulties"] == ["hard", "medium", "easy"]
    from analysis import api  # and a notebook's, as the API's example says

    tables = api.load(tmp_path / "r2")
    with api.label_order(api.difficulty_order(tables.jobs)):
        fractions = api.tie_fractions(tables.groups[tables.groups["round"] == 0], by=["sampler"])
    assert fractions["difficulty"].tolist() == ["hard", "medium", "easy"]

    # an order that leaves a logged label out, or one for pass-rate bins: one line, nothing written
    with pytest.raises(IngestError, match=r"^--difficulty-order hard,easy: does not name medium \(logged level: "
                                          r"easy, medium, hard\)$"):
        ingest("verl", dump, tmp_path / "r3", Reading(difficulty_from="level", correct_from="acc",
                                                        difficulty_order=("hard", "easy")))
    with pytest.raises(IngestError, match=r"^--difficulty-order: orders the labels of a logged field"):
        ingest("verl", dump, tmp_path / "r3", Reading(correct_from="acc", difficulty_order=("hard", "easy")))
    assert not (tmp_path / "r3").exists()


def test_continuous_rewards_predict_no_ties_from_correct_counts(tmp_path):
    """Scores in [0, 1], "correct" at 1: nearly every group is all "wrong" yet none ties (its scores differ). The
    group-size section predicts nothing from the correct counts (it would say ~100% ties) and shows the ties
    observed, none."""
    rng = np.random.default_rng(3)
    steps = {}
    for step in range(1, 7):
        rows = verl_rows(PROMPTS, step, 8, rng, batch=9)
        for row in rows:
            row["score"] = round(float(rng.random()), 4)
        steps[step] = rows
    run = ingest("verl", write_verl(tmp_path / "dump", steps), tmp_path / "run",
                 Reading(difficulty_from="level", tokens_from="response_length"))
    _, details = report(run, tmp_path / "report")
    section = details[details.index("## Group size"):]
    section = section[:section.index("\n## ", 1)]
    assert "Not predicted: the rewards are not binary. Of 54 first-round groups of two or more samples, 54 (100%)" \
        in section
    assert "informative_frac" not in section and "best_for_groups" not in section
    observed = pd.read_csv(tmp_path / "report" / "tables" / "group_size_observed.csv")
    assert observed["tie_frac"].eq(0).all() and observed["groups"].sum() == 54
    assert not (tmp_path / "report" / "tables" / "group_size.csv").exists()
    ties = (tmp_path / "report" / "REPORT.md").read_text()  # nor the ties section, which would predict 100%
    assert "No prediction p^G + (1−p)^G: the rewards are not binary (54 of 54 first-round groups" in ties
    for table in ("ties_by_difficulty", "ties_by_step"):
        frame = pd.read_csv(tmp_path / "report" / "tables" / f"{table}.csv")
        assert frame["predicted_tie_frac"].isna().all() and frame["tie_frac"].eq(0).all(), table


def trl_run(tmp_path: Path, name: str, steps: int, prompts: int, label: str) -> Path:
    """A grpo-lab run exported as TRL's logs, with the trainer_state.json TRL saves (its loss and gradient norm a
    step: one optimizer step each), ingested."""
    cfg = job_config("fixed", group_size=8, seed=2, max_steps=steps, prompts_per_step=prompts)
    trl = trl_export(simulate_groups(prompt_pool(levels=("1", "2", "3"), per_level=16), cfg, name).to_pandas(),
                     tmp_path / name)
    state = {"log_history": [{"step": s, "loss": 0.01, "grad_norm": 0.5} for s in range(1, steps + 1)]}
    (trl / "trainer_state.json").write_text(json.dumps(state))
    return ingest("trl", trl, tmp_path / f"{name}-run", Reading(difficulty_from="level", correct_from="accuracy"),
                  settings={"label": label})


def test_two_sources_far_apart_in_samples_are_titled_by_both_and_never_said_equal(tmp_path):
    big = trl_run(tmp_path, "trl-big", steps=12, prompts=16, label="big")  # 12 x 16 x 8 = 1,536 samples
    small = trl_run(tmp_path, "trl-small", steps=3, prompts=2, label="small")  # 3 x 2 x 8 = 48
    text, details = report([big, small], tmp_path / "report", by=["label"])
    assert text.startswith("# Report: trl-big-run + trl-small-run\n")
    assert details.startswith("# Details: trl-big-run + trl-small-run\n")
    words = details[details.index("## Each comparison in words"):]
    words = words[:words.index("\n## ", 1)]
    assert "At equal samples" not in words
    said = re.findall(r"At the end of each job's budget, not at equal samples \(([^)]*)\), big took 12 updates and "
                      r"small 3", words)
    assert said and all(s == "big 1,536 samples, small 48, 32.0x apart: they share only the first 48, 3% of the "
                        "larger" for s in said)
