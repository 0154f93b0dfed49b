"""open-instruct's rollout traces (`--save_traces`) read into grpo-lab's tables: groups, ties, correctness and token
counts recounted from the raw JSON lines with plain pandas; traces written after its zero-std filter say what that
hides; every malformed input one line naming file:line, nothing written; the command line's --help, and a report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.ingest import IngestError, Reading, ingest
from analysis.ingest.tables import prompt_id
from fixtures.synthetic import prompt_pool
from fixtures.tool_logs import open_instruct_traces, read_parts

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = prompt_pool(levels=("1", "2", "3"), per_level=8)
RUN = "rlvr__1__1750000000"
RIGHT = Reading(correct_at=10)  # verification_reward: a right answer scores 10


def raw(folder: Path) -> pd.DataFrame:
    """Every trace line, as plain JSON rows (the recount's reading)."""
    lines = [json.loads(line) for path in sorted(folder.glob("*_rollouts_*.jsonl"))
             for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(lines)


def cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_traces_recount_from_their_json_lines(tmp_path):
    """Filter off (every group drawn written): each group's tie and kind, n correct at reward >= 10, tokens (the
    responses' lengths) and truncations recount from the lines; steps are open-instruct's + 1; a second shard
    continues the run; the seed comes from the run name."""
    traces = open_instruct_traces(tmp_path / "oi", PROMPTS, steps=6, batch=6, n=4, filter_zero_std=False,
                                  shard_size=50)
    assert len(list(traces.glob("*_rollouts_*.jsonl"))) > 1
    out = ingest("open_instruct", traces, tmp_path / "run", RIGHT)
    groups = read_parts(out, "groups")
    lines = raw(traces)
    lines["tokens"] = lines["response_tokens"].str.len()
    truth = lines.groupby(["step", "prompt_idx"]).agg(
        n=("reward", "size"), spread=("reward", lambda r: r.max() - r.min()),
        right=("reward", lambda r: (r >= 10).sum()), tokens=("tokens", "sum"),
        cut=("finish_reason", lambda f: (f == "length").sum()), prompt=("prompt_tokens", "first"))
    assert (truth["n"] == 4).all() and len(groups) == len(truth)
    assert groups["step"].tolist() == [s + 1 for s, _ in truth.index]
    assert groups["tie"].tolist() == (truth["spread"] == 0).tolist() and groups["tie"].any()
    assert groups["n_correct"].tolist() == truth["right"].tolist()
    assert groups["tokens"].tolist() == truth["tokens"].tolist()
    assert groups["truncated"].tolist() == truth["cut"].tolist() and groups["truncated"].sum() > 0
    assert groups["tokens_total"].iloc[-1] == lines["tokens"].sum()
    assert groups["prompt_id"].tolist() == [prompt_id(json.dumps(p)) for p in truth["prompt"]]
    kinds = groups.loc[groups["tie"], "tie_kind"]
    assert set(kinds) <= {"all_correct", "all_wrong"}
    assert (kinds == "all_correct").sum() == ((truth["spread"] == 0) & (truth["right"] == 4)).sum()
    config = json.loads((out / "config.json").read_text())
    assert config["seed"] == 1 and config["sampler.group_size"] == 4 and config["source.tool"] == "open_instruct"
    record = json.loads((out / "run.json").read_text())["imported"]
    assert record["title"] == "open-instruct" and record["version"] == "e6c3044aa620"
    assert record["how"]["ties"].startswith("the traces hold") and "filter_zero_std_samples was off" in \
        record["how"]["ties"]
    assert not any("dropped before writing" in a for a in record["absent"])


def test_traces_after_the_zero_std_filter_say_what_that_hides(tmp_path):
    """open-instruct's default: tied groups are dropped before the traces are written, so none is in them; the
    provenance says the recomputed ties undercount, and the report quotes it."""
    traces = open_instruct_traces(tmp_path / "oi", PROMPTS, steps=5, batch=8, n=4)
    out = ingest("open_instruct", traces, tmp_path / "run", RIGHT)
    groups = read_parts(out, "groups")
    assert not groups["tie"].any() and len(groups) == len(raw(traces)) // 4
    record = json.loads((out / "run.json").read_text())["imported"]
    hidden = [a for a in record["absent"] if a.startswith("the tied groups open-instruct dropped")]
    assert hidden and "undercount ties" in hidden[0]
    assert "zero-std filtering" in record["how"]["ties"]
    report = cli("analysis", str(out), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-2000:]
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert "open-instruct e6c3044aa620" in text and "tie fractions recomputed from these traces undercount ties" in text


def _lines(folder: Path) -> tuple[Path, list[str]]:
    path = folder / f"{RUN}_rollouts_000000.jsonl"
    return path, path.read_text().splitlines()


def _bad_json(folder):
    path, lines = _lines(folder)
    lines[6] = lines[6][:-12]  # cut short, as a trace written while the run was killed
    path.write_text("\n".join(lines) + "\n")


def _no_reward(folder):
    path, lines = _lines(folder)
    row = json.loads(lines[9])
    del row["reward"]
    lines[9] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _text_reward(folder):
    path, lines = _lines(folder)
    row = json.loads(lines[2])
    row["reward"] = "10.0"
    lines[2] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _row_dropped(folder):  # mask_truncated_completions drops a row: its group no longer has G
    path, lines = _lines(folder)
    del lines[5]
    path.write_text("\n".join(lines) + "\n")


def _other_prompt(folder):  # a row of another prompt inside a group
    path, lines = _lines(folder)
    row = json.loads(lines[1])
    row["prompt_tokens"] = row["prompt_tokens"] + [7]
    lines[1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _step_twice(folder):  # a resumed run writes its first step again
    path, lines = _lines(folder)
    path.write_text("\n".join(lines + lines[:4]) + "\n")


def _two_runs(folder):
    path, lines = _lines(folder)
    (folder / "other__2__1750000001_rollouts_000000.jsonl").write_text("\n".join(lines) + "\n")


def _empty(folder):
    for path in folder.iterdir():
        path.unlink()


BAD = {  # name -> (edit, what the one line says)
    "bad JSON line": (_bad_json, rf"{RUN}_rollouts_000000\.jsonl:7: not a JSON line"),
    "missing reward": (_no_reward, rf"{RUN}_rollouts_000000\.jsonl:10: no 'reward'"),
    "reward not a number": (_text_reward, rf"{RUN}_rollouts_000000\.jsonl:3: reward '10\.0' is not a finite number"),
    "group does not divide": (_row_dropped, rf"{RUN}_rollouts_000000\.jsonl:\d+: prompt_idx 1 of step 0 has 3 rows "
                                            "where groups have 4"),
    "another prompt in a group": (_other_prompt, rf"{RUN}_rollouts_000000\.jsonl:2: a row of prompt_idx 0 with "
                                                 "another prompt"),
    "a step written twice": (_step_twice, rf"{RUN}_rollouts_000000\.jsonl:\d+: step 0 sample_idx 0 was written "
                                          rf"before, at {RUN}_rollouts_000000\.jsonl:1"),
    "two runs": (_two_runs, r"the traces of 2 runs \(other__2__1750000001, rlvr__1__1750000000\): name one with "
                            "--run-name"),
    "empty folder": (_empty, r"no <run_name>_rollouts_<shard>\.jsonl \(open-instruct writes them with --save_traces"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_trace_is_one_line_naming_file_and_line_and_writes_nothing(tmp_path, case):
    edit, says = BAD[case]
    traces = open_instruct_traces(tmp_path / "oi", PROMPTS, steps=3, batch=3, n=4, filter_zero_std=False)
    edit(traces)
    with pytest.raises(IngestError, match=says):
        ingest("open_instruct", traces, tmp_path / "run", RIGHT)
    assert not (tmp_path / "run").exists()


def test_the_command_line_names_its_options_and_reads_one_run_of_several(tmp_path):
    helped = cli("analysis.ingest", "open_instruct", "--help")
    assert helped.returncode == 0 and "--run-name NAME" in helped.stdout and "example:" in helped.stdout
    assert "python -m analysis.ingest open_instruct ROLLOUTS_DIR --out" in helped.stdout
    traces = open_instruct_traces(tmp_path / "oi", PROMPTS, steps=2, batch=3, n=4, filter_zero_std=False)
    open_instruct_traces(traces, PROMPTS, steps=3, batch=3, n=4, seed=5, run_name="other__7__1750000001")
    wrong = cli("analysis.ingest", "open_instruct", str(traces), "--out", str(tmp_path / "run"), "--validation", "x")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert wrong.stderr.startswith("error: --validation: not an option of open_instruct (its own: --run-name; ")
    out = cli("analysis.ingest", "open_instruct", str(traces), "--out", str(tmp_path / "run"), "--correct-at", "10",
              "--run-name", "other__7__1750000001")
    assert out.returncode == 0, out.stderr
    assert "not in the source: held-out evaluation" in out.stdout
    groups = read_parts(tmp_path / "run", "groups")
    assert sorted(set(groups["step"])) == [1, 2, 3]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["seed"] == 7
    np.testing.assert_array_equal(groups["group_size"], 4)
