"""NeMo-RL's training data dumps (`train_data_step<N>.jsonl`, `val_data_step<N>.jsonl`) read into grpo-lab's tables:
groups of consecutive rows, ties, correctness and token counts recounted from the raw JSON lines with plain pandas;
dynamic sampling's dropped ties said; every malformed input one line naming file:line, nothing written; a report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.ingest import IngestError, ingest
from fixtures.synthetic import prompt_pool
from fixtures.tool_logs import nemo_rl_dumps, read_parts

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = prompt_pool(levels=("1", "2", "3"), per_level=8)
HELD_OUT = prompt_pool(levels=("1", "2", "3"), per_level=3, seed=1).assign(prompt_id=lambda d: "H" + d["prompt_id"])
G = 4


def raw(folder: Path, kind: str = "train") -> pd.DataFrame:
    """Every dumped line, each field's one-element list unwrapped, with its step from the file name."""
    rows = []
    for path in folder.glob(f"{kind}_data_step*.jsonl"):
        step = int(path.stem.rsplit("step", 1)[1])
        rows += [{**{k: v[0] if isinstance(v, list) else v for k, v in json.loads(line).items()}, "step": step}
                 for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows).sort_values(["step", "idx"], kind="stable").reset_index(drop=True)


def test_dumps_recount_from_their_json_lines(tmp_path):
    """G consecutive rows a group: each group's tie and kind, n correct, generated tokens (token_loss_mask within
    input_lengths) and the held-out pass rates recount from the lines."""
    dumps = nemo_rl_dumps(tmp_path / "logs" / "exp_001", PROMPTS, HELD_OUT, steps=5, batch=6, n=G)
    out = ingest("nemo_rl", dumps, tmp_path / "run")
    groups = read_parts(out, "groups")
    lines = raw(dumps)
    lines["group"] = lines.groupby("step").cumcount() // G  # repeat_interleave: G in a row
    lines["generated"] = [sum(m[:n]) for m, n in zip(lines["token_loss_mask"], lines["input_lengths"])]
    truth = lines.groupby(["step", "group"]).agg(
        spread=("rewards", lambda r: r.max() - r.min()), right=("rewards", "sum"), tokens=("generated", "sum"),
        prompts=("content", lambda c: len({m[0] for m in c})))
    assert (truth["prompts"] == 1).all() and len(groups) == len(truth)
    assert groups["tie"].tolist() == (truth["spread"] == 0).tolist() and groups["tie"].any()
    assert groups["n_correct"].tolist() == truth["right"].astype(int).tolist()
    assert groups["tokens"].tolist() == truth["tokens"].tolist()
    assert groups["tokens_total"].iloc[-1] == lines["generated"].sum()
    tied = groups[groups["tie"]]
    assert set(tied["tie_kind"]) <= {"all_correct", "all_wrong"}
    assert (tied["tie_kind"] == "all_correct").sum() == ((truth["spread"] == 0) & (truth["right"] == G)).sum()
    # held-out: step 0 and the last, pass@1 per step the mean reward
    evals = read_parts(out, "eval")
    val = raw(dumps, "val")
    assert sorted(set(evals["step"])) == [0, 5] and len(evals) == len(val) and set(evals["n"]) == {4}
    np.testing.assert_allclose(evals.groupby("step")["correct"].mean().to_numpy(),
                               val.groupby("step")["rewards"].mean().to_numpy())
    record = json.loads((out / "run.json").read_text())["imported"]
    assert record["title"] == "NeMo-RL" and record["how"]["tokens"].startswith("each row's generated tokens counted")
    assert record["how"]["grouping"].startswith("4 consecutive rows of one prompt within a file")


def test_dynamic_sampling_dumps_the_rows_own_rewards_and_says_ties_were_dropped(tmp_path):
    """With grpo.use_dynamic_sampling the rows' rewards are `filtered_rewards` (`rewards` holds the unfiltered batch's
    by position): the ingest reads those and says the dropped ties are not in the dumps."""
    dumps = nemo_rl_dumps(tmp_path / "exp", PROMPTS, None, steps=3, batch=6, n=G)
    rng = np.random.default_rng(1)
    for path in dumps.glob("train_data_step*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row["filtered_rewards"] = row["rewards"]
            row["rewards"] = [float(rng.integers(0, 2))]  # another row's, by position
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = ingest("nemo_rl", dumps, tmp_path / "run")
    lines = raw(dumps)
    means = lines.groupby([lines["step"], lines.groupby("step").cumcount() // G])["filtered_rewards"].mean()
    np.testing.assert_allclose(read_parts(out, "groups")["reward_mean"], means.to_numpy())
    record = json.loads((out / "run.json").read_text())["imported"]
    assert record["how"]["reward"].startswith("`filtered_rewards`")
    assert any(a.startswith("the tied groups NeMo-RL's dynamic sampling dropped") for a in record["absent"])


def test_an_older_dump_without_token_ids_groups_by_the_prompt_text_and_has_no_token_counts(tmp_path):
    """NeMo-RL before 2026-02 dumped content, rewards, generation_logprobs, prev_logprobs and input_lengths only: the
    groups are the same (consecutive rows of one prompt text), the token counts absent and said to be."""
    dumps = nemo_rl_dumps(tmp_path / "exp", PROMPTS, None, steps=3, batch=6, n=G)
    new = ingest("nemo_rl", dumps, tmp_path / "new")
    for path in dumps.glob("train_data_step*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        kept = ("content", "rewards", "generation_logprobs", "prev_logprobs", "input_lengths", "idx")
        path.write_text("".join(json.dumps({k: r[k] for k in kept}) + "\n" for r in rows))
    old = ingest("nemo_rl", dumps, tmp_path / "old")
    a, b = read_parts(new, "groups"), read_parts(old, "groups")
    same = ["step", "n_correct", "tie", "tie_kind"]
    pd.testing.assert_frame_equal(a[same], b[same])
    assert b["tokens"].isna().all() and a["tokens"].notna().all()
    record = json.loads((old / "run.json").read_text())["imported"]
    assert "its messages' text, no token ids dumped" in record["how"]["grouping"]
    assert any(a.startswith("token counts (") for a in record["absent"])


def _edit(folder: Path, step: int, index: int, change) -> None:
    path = folder / f"train_data_step{step}.jsonl"
    lines = path.read_text().splitlines()
    lines[index] = change(lines[index])
    path.write_text("\n".join(line for line in lines if line is not None) + "\n")


def _field(key, value):
    def change(line):
        row = json.loads(line)
        if value is None:
            del row[key]
        else:
            row[key] = value
        return json.dumps(row)
    return change


def _empty(folder):
    for path in folder.iterdir():
        path.unlink()


BAD = {  # name -> (edit, what the one line says)
    "bad JSON line": (lambda f: _edit(f, 2, 4, lambda line: line[:-20]), r"train_data_step2\.jsonl:5: not a JSON line"),
    "missing rewards": (lambda f: _edit(f, 1, 6, _field("rewards", None)), r"train_data_step1\.jsonl:7: no 'rewards'"),
    "reward not a number": (lambda f: _edit(f, 3, 2, _field("rewards", ["1"])),
                            r"train_data_step3\.jsonl:3: rewards '1' is not a finite number"),
    "not one row's value": (lambda f: _edit(f, 1, 0, _field("rewards", [1.0, 0.0])),
                            r"train_data_step1\.jsonl:1: rewards is not one row's value"),
    "group does not divide": (lambda f: _edit(f, 2, 3, lambda line: None),
                              r"train_data_step2\.jsonl:1: 3 consecutive completions of one prompt, not a multiple of "
                              "the group size 4"),
    "group size not told": (lambda f: _edit(f, 2, 3, lambda line: None),
                            r"train_data_step2\.jsonl:1: 3 consecutive completions of one prompt where most runs are 4 "
                            r"long: cannot tell NeMo-RL's num_generations_per_prompt \(pass --group-size\)"),
    "no loss mask": (lambda f: _edit(f, 1, 2, _field("token_loss_mask", None)),
                     r"train_data_step1\.jsonl:3: token_ids without token_loss_mask"),
    "empty folder": (_empty, r"no train_data_step<N>\.jsonl \(NeMo-RL writes them into logger\.log_dir"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_dump_is_one_line_naming_file_and_line_and_writes_nothing(tmp_path, case):
    edit, says = BAD[case]
    dumps = nemo_rl_dumps(tmp_path / "exp", PROMPTS, None, steps=3, batch=3, n=G)
    edit(dumps)
    kwargs = {"group_size": G} if case == "group does not divide" else {}
    with pytest.raises(IngestError, match=says):
        ingest("nemo_rl", dumps, tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


def test_a_dump_ingests_and_reports_through_the_command_line(tmp_path):
    dumps = nemo_rl_dumps(tmp_path / "logs" / "exp_001", PROMPTS, HELD_OUT, steps=4, batch=6, n=G)
    helped = subprocess.run([sys.executable, "-m", "analysis.ingest", "nemo_rl", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert helped.returncode == 0 and "python -m analysis.ingest nemo_rl logs/exp_001 --out" in helped.stdout
    out = subprocess.run([sys.executable, "-m", "analysis.ingest", "nemo_rl", str(dumps), "--out",
                          str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "not in the source: the evaluated samples' token counts" in out.stdout
    report = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path / "run"), "--out",
                             str(tmp_path / "report")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert "NeMo-RL (version not recorded), 6 files" in text
    assert "No eval tables were found" not in text  # the val dumps are its held-out rows
