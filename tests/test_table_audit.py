"""Tables a run could not have written, made as issue 56's probe made them (real tables edited): each part is left out
of the analysis and named with its row and what is impossible in it, and a report of the sweep names it."""

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.data.load import SkippedWarning, load

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "reports" / "main" / "data"


def _edit(table: pa.Table, column: str, values) -> pa.Table:
    i = table.schema.get_field_index(column)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def invert_ties(t):
    return _edit(t, "tie", ~t.column("tie").to_numpy())


def count_99(t):
    n = t.column("n_correct").to_numpy().copy()
    n[5] = 99
    return _edit(t, "n_correct", n)


def infinite_reward(t):
    mean = t.column("reward_mean").to_numpy().copy()
    mean[7] = np.inf
    return _edit(t, "reward_mean", mean)


def steps_backwards(t):
    return _edit(t, "step", t.column("step").to_numpy()[::-1].copy())


def samples_backwards(t):
    total = t.column("samples_total").to_numpy().copy()
    total[10] = 0
    return _edit(t, "samples_total", total)


def kind_against_count(t):
    kinds = t.column("tie_kind").to_pylist()
    row = kinds.index("all_correct")
    n = t.column("n_correct").to_numpy().copy()
    n[row] = 0
    return _edit(t, "n_correct", n)


EDITS = {  # name -> (table, edit, what the skip says)
    "tie flags inverted": ("groups", invert_ties, r"row 0: tie (True|False) with tie_kind"),
    "n_correct 99 in groups of 8": ("groups", count_99, r"row 5: n_correct 99 outside 0\.\.group_size 8"),
    "an infinite reward": ("groups", infinite_reward, r"row 7: reward_mean inf is not finite"),
    "steps numbered backwards": ("steps", steps_backwards, r"row 1: step \d+ after step \d+"),
    "samples drawn going backwards": ("groups", samples_backwards, r"row 10: samples_total 0 after \d+"),
    "all correct with none right": ("groups", kind_against_count, r"row \d+: tie_kind all_correct with n_correct 0"),
}


@pytest.mark.parametrize("case", EDITS)
def test_an_impossible_table_is_left_out_and_named(tmp_path, case):
    table, edit, says = EDITS[case]
    sweep = tmp_path / "sweep"
    for job in ("0", "1", "10"):
        shutil.copytree(SOURCE / job, sweep / job)
    part = sweep / "1" / table / "part-000000.parquet"
    pq.write_table(edit(pq.read_table(part)), part)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = load(sweep)
    said = [str(w.message) for w in caught if issubclass(w.category, SkippedWarning)]
    assert len(said) == 1 and said[0].startswith(f"skipped 1/{table}/part-000000.parquet: ")
    assert re.search(says, said[0]), said[0]
    assert [s.name for s in tables.skipped] == [f"1/{table}/part-000000.parquet"]


def test_the_committed_data_passes_the_audit():
    for report in ("main", "smollm2"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SkippedWarning)
            assert not load(ROOT / "reports" / report / "data").skipped


def test_a_job_copied_in_from_another_sweep_is_left_out_and_named(tmp_path):
    """Issue 56's probe copied a job of another sweep into a sweep's folder: it read as one more seed of its arm.
    Hydra recorded where it ran the job (.hydra/hydra.yaml): not in this sweep, so it is left out and named."""
    sweep, other = tmp_path / "sweep", tmp_path / "other"
    shutil.copytree(SOURCE, sweep)
    shutil.copytree(SOURCE / "3", other / "3")
    hydra = other / "3" / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace("output_dir: /work/runs/main/3", "output_dir: /elsewhere/sweep/3"))
    record = other / "3" / "run.json"
    record.write_text(record.read_text().replace('"run_id": "', '"run_id": "other-'))  # its own run
    shutil.copytree(other / "3", sweep / "20")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = load(sweep, tables=("steps",))
    said = [str(w.message) for w in caught if issubclass(w.category, SkippedWarning)]
    assert sorted(tables.jobs["job"], key=int) == [str(k) for k in range(20)]
    assert said == ["skipped 20: Hydra ran it as /elsewhere/sweep/3, another job than this folder's: a job copied "
                    "in from another sweep is left out; give that sweep as a source of its own"]
    assert load(sweep / "20", tables=("steps",)).jobs["job"].tolist() == ["20"]  # alone, it is a run like any


def test_a_sweep_moved_and_partly_resumed_elsewhere_keeps_every_job(tmp_path):
    """The other side of the same record: a sweep copied off a cluster, some of its jobs resumed in the new place
    (Hydra rewrites their .hydra/hydra.yaml there). Each is still its own planned job: nothing is left out; a job
    beyond the plan's count written elsewhere is."""
    sweep = tmp_path / "sweep"
    shutil.copytree(SOURCE, sweep)
    for job in ("2", "5"):
        hydra = sweep / job / ".hydra" / "hydra.yaml"
        hydra.write_text(hydra.read_text().replace(f"output_dir: /work/runs/main/{job}",
                                                   f"output_dir: /laptop/main/{job}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedWarning)
        assert len(load(sweep, tables=("steps",)).jobs) == 20
    shutil.copytree(sweep / "5", sweep / "20")  # numbered past the 20 jobs multirun.yaml plans, written elsewhere
    hydra = sweep / "20" / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace("/laptop/main/5", "/laptop/main/20"))
    record = sweep / "20" / "run.json"
    record.write_text(record.read_text().replace('"run_id": "', '"run_id": "other-'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = load(sweep, tables=("steps",))
    said = [str(w.message) for w in caught if issubclass(w.category, SkippedWarning)]
    assert len(tables.jobs) == 20 and said == [
        "skipped 20: Hydra ran it in /laptop/main, not in this sweep's /work/runs/main, and this sweep's multirun.yaml "
        "plans 20 jobs: a job copied in from another sweep is left out; give that sweep as a source of its own"]
