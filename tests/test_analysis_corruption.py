"""Corrupted sweeps: every bad job or part is named and skipped, the good jobs still make a report."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from reference import both_pages

from analysis.data.load import NoRunsError, SkippedWarning, load
from analysis.data.schema import CONTRACT, NO_NAN, value_problems
from analysis.report import build_report
from fixtures.synthetic import job_config as make_config
from fixtures.synthetic import prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent


def _rewrite(path: Path, change) -> None:
    pq.write_table(change(pq.read_table(path)), path)


def _set(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.column_names.index(column), column, values)


CORRUPTIONS = {  # job -> (what is done to it, the skipped name, words the reason must hold)
    "1": (lambda run: (run / "run.json").write_text("[1, 2]"), "1", "run.json is not a JSON object"),
    "2": (lambda run: __import__("shutil").rmtree(run / ".hydra"), "2", "no config"),
    "3": (lambda run: _rewrite(run / "groups" / "part-000002.parquet", lambda t: t.drop_columns(["tie"])),
          "3/groups/part-000002.parquet", "missing column tie"),
    "4": (lambda run: _rewrite(run / "groups" / "part-000001.parquet",
                               lambda t: _set(t, "tie", pa.nulls(t.num_rows, pa.bool_()))),
          "4/groups/part-000001.parquet", "null"),
    "5": (lambda run: _rewrite(run / "groups" / "part-000003.parquet",
                               lambda t: _set(t, "step", pc.cast(t["step"], pa.string()))),
          "5/groups/part-000003.parquet", "column step is string, not int"),
    "6": (lambda run: _rewrite(run / "groups" / "part-000001.parquet",
                               lambda t: _set(t, "reward_mean", pa.array([float("nan")] * t.num_rows, pa.float32()))),
          "6/groups/part-000001.parquet", "NaN"),
    "7": (lambda run: _rewrite(run / "eval" / "part-000000.parquet", lambda t: t.drop_columns(["correct"])),
          "7/eval/part-000000.parquet", "missing column correct"),
    "8": (lambda run: (run / "groups" / "part-000004.parquet").write_bytes(b"PAR1 not really"),
          "8/groups/part-000004.parquet", "unreadable part"),
}


@pytest.fixture
def corrupted(tmp_path):
    configs = [make_config("fixed" if i % 2 == 0 else "resample_on_tie", seed=i, max_steps=5, prompts_per_step=4)
               for i in range(10)]
    prompts = prompt_pool(per_level=4)
    sweep = write_sweep(tmp_path / "sweep", configs, prompts, eval_prompts=prompts, eval_n=4)
    for job, (corrupt, _, _) in CORRUPTIONS.items():
        corrupt(sweep / job)
    return sweep


def test_every_corruption_is_named_and_the_good_jobs_load(corrupted):
    with pytest.warns(SkippedWarning):
        tables = load(corrupted)
    reasons = {s.name: s.reason for s in tables.skipped}
    for job, (_, name, words) in CORRUPTIONS.items():
        assert name in reasons and words in reasons[name], (job, reasons)
    assert set(tables.jobs["job"]) == {"0", "3", "4", "5", "6", "7", "8", "9"}  # bad parts go, their jobs stay
    g = tables.groups
    assert g["tie"].notna().all() and g["reward_mean"].notna().all()
    assert g["tie"].mean() >= (g["tie_kind"] == "all_correct").mean()  # tie_frac can no longer fall below it
    assert set(g.loc[g["job"] == "3", "step"]) == {1, 3, 4, 5}  # steps count from 1, as the trainer's; part 2 went


def test_tables_read_first_load_and_skip_what_one_pass_does(corrupted):
    """`load(first=..., on_first=...)` reads the eval parts before the others and hands what they hold over
    meanwhile (the report's held-out sections begin there): the tables, the skipped and the warnings (in
    job, table and part order) are those of one pass, and nothing is warned of twice."""
    _rewrite(corrupted / "3" / "steps" / "part-000001.parquet", lambda t: t.drop_columns(["step"]))  # 2 in a job
    for part in (corrupted / "4" / "eval").glob("part-*.parquet"):  # every eval part of job 4 broken
        _rewrite(part, lambda t: t.drop_columns(["correct"]))
    with pytest.warns(SkippedWarning) as warned:
        one = load(corrupted)
    early = []
    with pytest.warns(SkippedWarning) as warned_staged:
        staged = load(corrupted, first=("eval",), on_first=early.append)
    assert [s.name for s in one.skipped][:4] == ["1", "2", "3/groups/part-000002.parquet",
                                                 "3/steps/part-000001.parquet"]
    assert staged.skipped == one.skipped
    assert [str(w.message) for w in warned_staged] == [str(w.message) for w in warned]
    for table in ("jobs", "groups", "steps", "eval"):
        pd.testing.assert_frame_equal(getattr(staged, table), getattr(one, table))
    (first,) = early  # the eval rows alone, of the jobs that have readable ones (4's are broken)
    assert first.groups.empty and first.steps.empty and not first.skipped
    with_eval = sorted(set(one.eval["job"].astype(str)))
    assert list(first.jobs["job"]) == with_eval and "4" not in with_eval and "4" in set(one.jobs["job"])
    own = list(one.own["eval"])  # the table's columns (the config's categories differ: one job fewer)
    assert list(first.own["eval"]) == own
    pd.testing.assert_frame_equal(first.eval[own], one.eval[own])


def test_the_report_is_written_for_the_good_jobs(corrupted):
    with pytest.warns(SkippedWarning):
        report = build_report(corrupted)
    text = both_pages(report)  # the skipped are named under Jobs, on the details page
    for _, name, _ in CORRUPTIONS.values():
        assert f"`{name}`" in text


def test_missing_or_empty_folder_is_one_line_and_a_nonzero_exit(tmp_path):
    with pytest.raises(NoRunsError, match="no run or sweep directory"):
        load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoRunsError, match="no grpo-lab runs in"):
        load(tmp_path / "empty")
    for folder in ("missing", "empty"):
        out = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path / folder)], capture_output=True,
                             text=True, cwd=ROOT)
        assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1 and "error:" in out.stderr
    job = tmp_path / "only_bad" / "0"
    job.mkdir(parents=True)
    (job / "run.json").write_text(json.dumps({"status": "done"}))
    with pytest.raises(NoRunsError, match=r"no usable job .* 1 found, every one skipped"):
        load(tmp_path / "only_bad")


def plain_value_problem(table: str, data: pa.Table) -> str | None:
    """One part's value problem, column by column with arrow's compute functions (the loader's rule)."""
    for column in data.column_names:
        want = CONTRACT[table].get(column)
        if want is None:
            continue
        values = data.column(column)
        if not want.endswith("?") and values.null_count:
            return f"{values.null_count} null{'s' * (values.null_count > 1)} in column {column}"
        if column in NO_NAN[table]:
            flat = pc.list_flatten(values) if want.startswith("list") else values
            nans = pc.sum(pc.is_nan(flat)).as_py() or 0
            if nans:
                return f"{nans} NaN value{'s' * (nans > 1)} in column {column}"
    return None


def test_value_problems_of_many_parts_equal_each_part_checked_alone(tmp_path):
    sweep = write_sweep(tmp_path / "sweep", [make_config(max_steps=8, prompts_per_step=4)], prompt_pool(per_level=4))
    parts = [pq.read_table(p) for p in sorted((sweep / "0" / "groups").glob("part-*.parquet"))]
    null_and_nan = pa.array([None, float("nan")] + [0.5] * (parts[0].num_rows - 2), pa.float32())
    rewards = pa.array([[float("nan")] * 8, [float("nan"), 1.0] + [0.0] * 6] + [[1.0] * 8] * (parts[0].num_rows - 2),
                       pa.list_(pa.float32()))
    parts[1] = _set(parts[1], "reward_mean", pa.array([float("nan")] * parts[1].num_rows, pa.float32()))
    parts[2] = _set(parts[2], "tie", pa.nulls(parts[2].num_rows, pa.bool_()))
    parts[3] = _set(parts[3], "reward_mean", null_and_nan.slice(0, parts[3].num_rows))  # the null is said first
    parts[4] = _set(parts[4], "rewards", rewards.slice(0, parts[4].num_rows))  # NaN inside the lists: 8 + 1
    parts[5] = parts[5].slice(0, 0)  # an empty part
    parts[6] = _set(parts[6], "reward_std", pc.cast(parts[6]["reward_std"], pa.float64()))  # a wider float
    expected = [plain_value_problem("groups", part) for part in parts]
    assert value_problems("groups", parts) == expected
    assert [e is not None for e in expected] == [False, True, True, True, True, False, False, False]
    assert expected[4] == "9 NaN values in column rewards" and expected[3] == "1 null in column reward_mean"


def test_value_problems_of_parts_that_cannot_be_put_together_check_each_alone(tmp_path):
    """A part whose column arrow cannot merge with the others' (a dictionary beside plain strings): every
    part is still checked, each as if alone."""
    sweep = write_sweep(tmp_path / "sweep", [make_config(max_steps=4, prompts_per_step=4)], prompt_pool(per_level=4))
    parts = [pq.read_table(p) for p in sorted((sweep / "0" / "groups").glob("part-*.parquet"))]
    parts[0] = _set(parts[0], "prompt_id", pc.dictionary_encode(parts[0]["prompt_id"]))
    parts[2] = _set(parts[2], "reward_std", pa.array([float("nan")] * parts[2].num_rows, pa.float32()))
    with pytest.raises(pa.ArrowException):
        pa.concat_tables(parts, promote_options="permissive")
    expected = [plain_value_problem("groups", part) for part in parts]
    assert value_problems("groups", parts) == expected
    assert expected[2] == f"{parts[2].num_rows} NaN values in column reward_std" and expected.count(None) == 3
