"""Loading runs and sweeps: config columns, aliases, and jobs or parts that must be skipped."""

import json
import shutil

import pytest
import yaml

from analysis.data.config import flatten, job_config, launch_command
from analysis.data.load import SkippedWarning, load
from fixtures.synthetic import job_config as make_config
from fixtures.synthetic import prompt_pool, write_sweep


@pytest.fixture
def sweep(tmp_path):
    configs = [make_config("fixed", seed=0, max_steps=6, prompts_per_step=4),
               make_config("fixed", seed=1, max_steps=6, prompts_per_step=4),
               make_config("resample_on_tie", seed=0, max_steps=6, prompts_per_step=4, group_size=4)]
    prompts = prompt_pool(per_level=4)
    return write_sweep(tmp_path / "sweep", configs, prompts, overrides=["sampler=fixed,resample_on_tie", "seed=0,1"],
                       eval_prompts=prompts, eval_n=4)


def test_a_sweep_loads_with_its_config_on_every_row(sweep):
    tables = load(sweep)
    assert tables.jobs["job"].tolist() == ["0", "1", "2"] and not tables.skipped
    groups = tables.groups
    assert len(groups) == sum(len(load(sweep / j).groups) for j in "012")
    by_job = groups.groupby("job", observed=True)
    assert by_job["sampler"].first().tolist() == ["fixed", "fixed", "resample_on_tie"]
    assert by_job["seed"].first().tolist() == [0, 1, 0]
    assert by_job["sampler.max_rounds"].first().tolist() == [4, 4, 4]  # every flattened key is a column
    assert by_job["group_size"].max().tolist() == [8, 8, 4]  # the table's own group_size wins over the config's
    for column in ("temperature", "difficulty_mode", "experiment", "task.levels"):
        assert column in groups.columns
    assert tables.eval["sampler"].notna().all() and len(tables.steps) == 3 * 6
    assert "rewards" not in groups.columns  # the list columns are left on disk unless asked for
    assert "rewards" in load(sweep, tables=("groups",), columns={"groups": None}).groups.columns


def test_failed_empty_and_unreadable_are_named_and_skipped(sweep):
    run = json.loads((sweep / "1" / "run.json").read_text())
    (sweep / "1" / "run.json").write_text(json.dumps(run | {"status": "failed", "error": "CUDA out of memory"}))
    (sweep / "3").mkdir()
    (sweep / "3" / "run.json").write_text(json.dumps(run | {"status": "done", "run_id": "run-3"}))
    (sweep / "0" / "groups" / "part-000002.parquet").write_bytes(b"not parquet")
    with pytest.warns(SkippedWarning) as caught:
        tables = load(sweep)
    messages = "\n".join(str(w.message) for w in caught)
    assert "skipped 1: failed (CUDA out of memory)" in messages
    assert "skipped 3: no readable groups/steps/eval parts" in messages
    assert "skipped 0/groups/part-000002.parquet: unreadable part" in messages
    assert [s.name for s in tables.skipped] == ["0/groups/part-000002.parquet", "1", "3"]
    assert tables.jobs["job"].tolist() == ["0", "2"]
    job0 = tables.groups[tables.groups["job"] == "0"]
    assert sorted(job0["step"].unique()) == [1, 3, 4, 5, 6]  # steps count from 1, part 2 lost


def test_a_sweep_with_only_group_tables(sweep):
    for job in "012":
        shutil.rmtree(sweep / job / "steps")
        shutil.rmtree(sweep / job / "eval")
    tables = load(sweep)
    assert not tables.groups.empty and tables.steps.empty and tables.eval.empty and not tables.skipped


def test_one_run_directory(sweep):
    tables = load(sweep / "2")
    assert tables.jobs["job"].tolist() == ["2"] and set(tables.groups["sampler"]) == {"resample_on_tie"}
    with pytest.raises(FileNotFoundError):
        load(sweep / "missing")
    with pytest.raises(ValueError, match="must be among groups, steps, eval"):
        load(sweep, tables=("group",))


def test_flatten_and_aliases(tmp_path):
    nested = {"a": {"b": 1, "c": [1, 2]}, "d": None, "e": {}}
    assert flatten(nested) == {"a.b": 1, "a.c": "[1, 2]", "d": None, "e": "{}"}
    (tmp_path / ".hydra").mkdir()
    config = {"seed": 3, "sampler": {"name": "band", "group_size": 16}, "rollout": {"temperature": 0.7},
              "task": {"difficulty": "pass_rate"}, "max_steps": 5, "total": "${max_steps}",
              "out": "${hydra:runtime.output_dir}"}
    (tmp_path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["+experiment=ties_by_difficulty"]))
    flat = job_config(tmp_path)
    assert {k: flat[k] for k in ("seed", "sampler", "group_size", "temperature", "difficulty_mode", "experiment")} == {
        "seed": 3, "sampler": "band", "group_size": 16, "temperature": 0.7, "difficulty_mode": "pass_rate",
        "experiment": "ties_by_difficulty"}
    assert flat["out"] == "${hydra:runtime.output_dir}"  # Hydra's own resolvers are unknown here: kept as written


def test_launch_command(sweep, tmp_path):
    assert launch_command(sweep) == "train -m sampler=fixed,resample_on_tie seed=0,1"
    (tmp_path / ".hydra").mkdir()
    hydra = {"hydra": {"job": {"name": "evaluate"}, "overrides": {"task": ["eval.n=64"]}}}
    (tmp_path / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))
    assert launch_command(tmp_path) == "evaluate eval.n=64"
    assert launch_command(tmp_path / "nothing") is None


def test_two_reading_threads_load_what_one_does(sweep, monkeypatch):
    """Where a report may use two cores, `load` reads with two threads (`cores.processes`): the same tables, and
    the same parts and jobs skipped in the same order, as one thread reads."""
    import pandas as pd

    from analysis.data.cores import PROCESSES

    (sweep / "0" / "groups" / "part-000002.parquet").write_bytes(b"not parquet")
    sorted((sweep / "2" / "steps").glob("part-*.parquet"))[1].write_bytes(b"")
    run = json.loads((sweep / "1" / "run.json").read_text())
    (sweep / "1" / "run.json").write_text(json.dumps(run | {"status": "failed"}))
    loaded = {}
    for n in ("1", "2"):
        monkeypatch.setenv(PROCESSES, n)
        with pytest.warns(SkippedWarning) as caught:
            loaded[n] = load(sweep, first=("eval",), on_first=lambda early: None), [str(w.message) for w in caught]
    (one, said_one), (two, said_two) = loaded["1"], loaded["2"]
    for table in ("jobs", "groups", "steps", "eval"):
        pd.testing.assert_frame_equal(getattr(one, table), getattr(two, table))
    assert one.skipped == two.skipped and said_one == said_two and len(said_one) == 3
