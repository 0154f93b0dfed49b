"""The jobs a report reads and how it tells arms apart (`--where`, `--by`, `--baseline`, analysis/data/select.py):
values of one key are alternatives and different keys must all hold; a choice that keeps no job, the seed as
an arm key and a baseline that names no arm are each one line, exit 2; any key and value, present or not, ends
in a report (exit 0) or one line (exit 2), never a traceback."""

import random
import shutil
import warnings

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.data.load import load
from fixtures.synthetic import two_sampler_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return two_sampler_sweep(tmp_path_factory.mktemp("select") / "sweep")


def run(capsys, *args):
    """(exit status, stderr lines) of `python -m analysis ARGS`, in this process."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = main([str(a) for a in args])
    return status, capsys.readouterr().err.strip().splitlines()


def jobs_listed(out):
    return pd.read_csv(out / "tables" / "jobs.csv")["job"].astype(str).tolist()


def test_repeated_where_on_one_key_keeps_either_value(sweep, tmp_path, capsys):
    """The issue's `--where sampler=fixed --where sampler=resample_on_tie` wrote "0 arms; 0 jobs", exit 0."""
    out = tmp_path / "r"
    status, err = run(capsys, sweep, "--out", out, "--where", "sampler=fixed", "--where", "sampler=resample_on_tie")
    assert status == 0 and err == []
    assert jobs_listed(out) == ["0", "1", "2", "3"]
    status, _ = run(capsys, sweep, "--out", out, "--where", "sampler=fixed", "--where", "sampler=resample_on_tie",
                    "--where", "seed=1")
    assert status == 0 and jobs_listed(out) == ["1", "3"]


@pytest.mark.parametrize("args, message", [
    (["--where", "sampler=resample_on_tie", "--where", "seed=1"],
     "error: --where: no job has sampler=resample_on_tie and seed=1 (each value is some job's, but not "
     "together: values of one key are alternatives, different keys must all hold)"),
    (["--where", "sampler=fixed", "--where", "sampler=dynamic"], "error: --where sampler=dynamic: no job has it "
     "(sampler is fixed, resample_on_tie)"),
    (["--baseline", "seed=0"], "error: --baseline seed=0: seed is not an arm key (seeds are replicates, compared "
     "across; arms are told apart by sampler): name an arm's value, e.g. --baseline sampler=fixed"),
    (["--by", "sampler", "--baseline", "algo.lr=0.0001"], "error: --baseline algo.lr=0.0001: algo.lr is not an arm "
     "key (arms are told apart by sampler): name an arm's value, e.g. --baseline sampler=fixed"),
    (["--by", "seed"], "error: --by seed: seeds are the replicates each arm is compared across, never an arm key; "
     "to read one seed, keep it with --where seed=N"),
    (["--by", "sampler,seed"], "error: --by seed: seeds are the replicates"),
    (["--where", "status=done"], "error: --where status: not a config key (keys that vary here: seed, sampler)"),
])
def test_a_choice_that_keeps_nothing_or_names_no_arm_is_one_line(sweep, tmp_path, capsys, args, message):
    """Each silently wrong or a traceback before (--baseline seed=0 ignored; --by seed a TypeError)."""
    partial = tmp_path / "sweep"  # job 3 (resample_on_tie, seed 1) missing: not every pair of values is a job
    shutil.copytree(sweep, partial, ignore=lambda at, names: ["3"] if at == str(sweep) else [])
    out = tmp_path / "r"
    status, err = run(capsys, partial, "--out", out, *args)
    assert status == 2 and len(err) == 1 and err[0].startswith(message), err
    assert not out.exists()


def test_a_baseline_named_by_an_alias_of_the_arm_key_comes_first(sweep, tmp_path, capsys):
    """`sampler.name` is the key `sampler` (the arm key) sets: its arm is `a` of every difference."""
    out = tmp_path / "r"
    status, err = run(capsys, sweep, "--out", out, "--baseline", "sampler.name=resample_on_tie")
    assert status == 0 and err == []
    assert jobs_listed(out) == ["2", "3", "0", "1"]


@pytest.mark.heavy
def test_any_key_and_value_ends_in_a_report_or_one_line(sweep, tmp_path, capsys):
    """A sweep over --where/--by/--baseline: every config key (varying, constant, aliases), a job-table column
    that is not config, a key no job has; each with a value some job holds, one none holds, an empty one.
    Exit 0 with a report, or exit 2 with exactly one line; never a traceback (an exception here)."""
    tables = load(sweep, tables=("steps",))
    keys = [*tables.config_columns, "job", "status", "nonexistent.key"]
    held = {k: tables.jobs[k].astype(str).tolist()[0] if k in tables.jobs else "x" for k in keys}
    pairs = [f"{k}={v}" for k in keys for v in (held[k], "no-such-value", "")]
    rng = random.Random(0)
    choices = [["--where", rng.choice(pairs)] for _ in range(8)]
    choices += [["--where", rng.choice(pairs), "--where", rng.choice(pairs)] for _ in range(6)]
    choices += [["--by", ",".join(rng.sample(keys, rng.randint(1, 2)))] for _ in range(10)]
    choices += [["--baseline", rng.choice(pairs)] for _ in range(8)]
    choices += [["--by", rng.choice(keys), "--baseline", rng.choice(pairs), "--where", rng.choice(pairs)]
                for _ in range(8)]
    choices += [["--by", k] for k in ("sampler", "sampler.name", "sampler.group_size", "algo.lr", "max_steps")]
    built = refused = 0
    for i, args in enumerate(choices):
        out = tmp_path / f"r{i}"
        status, err = run(capsys, sweep, "--out", out, *args)
        assert (status, len(err)) in ((0, 0), (2, 1)), (args, status, err)
        if status == 0:
            built += 1
            assert (out / "REPORT.md").is_file(), args
        else:
            refused += 1
            assert err[0].startswith("error: --") and not out.exists(), (args, err)
    assert built >= 8 and refused >= 8, (built, refused)  # the sweep reached both ends
