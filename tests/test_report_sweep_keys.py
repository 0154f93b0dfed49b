"""Real Hydra sweeps of the tiny model over keys other than the sampler end in their report: a dotted
float key and a list at once (`algo.lr` x `task.levels`), and a string key beside a key that is null in
some jobs (`algo.loss_agg` x `algo.micro_batch_groups=null,2`). Every section names the arms by their
real keys and values, and `python -m analysis` rebuilds the same report."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from reference import both_pages

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
SMALL = ["max_steps=3", "prompts_per_step=4", "sampler.group_size=4", "task.train_per_level=2",
         "task.eval_per_level=2", "eval.n=4", "eval.every=0", "threads=1"]  # prompts recur: persistence has pairs
SWEEPS = {
    "lr x levels": (["algo.lr=1e-4,2e-4", "task.levels=[1,2],[2,3]"],
                    {"algo.lr": ["0.0001", "0.0002"], "task.levels": ["[1, 2]", "[2, 3]"]}),
    "null": (["task.levels=[1,2]", "algo.loss_agg=sequence,token", "algo.micro_batch_groups=null,2"],
             {"algo.loss_agg": ["sequence", "token"], "algo.micro_batch_groups": ["2", "null"]}),
}


@pytest.fixture(scope="module", params=list(SWEEPS))
def sweep(request, tmp_path_factory):
    overrides, named = SWEEPS[request.param]
    root = tmp_path_factory.mktemp("keys") / "sweep"
    out = subprocess.run([sys.executable, "-m", "experiments.train", "-m", *overrides, *SMALL,
                          f"hydra.sweep.dir={root}"], cwd=ROOT, env=ENV, text=True, capture_output=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sweep report failed" not in out.stderr, out.stderr[-3000:]
    return root, named


def test_the_sweep_report_names_every_arm_by_its_keys_and_values(sweep):
    root, named = sweep
    text = both_pages(root / "report" / "REPORT.md")
    told = text.split("Arms are told apart by: ")[1].split(" (seeds")[0]
    keys = sorted(named, key=lambda k: told.index(f"`{k}`"))  # in the config's order
    assert told == ", ".join(f"`{k}`" for k in keys)
    a, b = keys
    arms = [f"{a}={x}, {b}={y}" for x in named[a] for y in named[b]]
    assert set(text.splitlines()[2].split(";")[0].split(" vs ")) == set(arms)
    for section in ("## Coverage after RL", "## Tie persistence", "## Tests across seeds"):
        part = text[text.index(section):text.index("\n## ", text.index(section) + 1)]
        assert all(arm in part for arm in arms), (section, part[:2000])
    for name in ("budget_by_arm", "persistence", "coverage_crossings", "heldout"):
        frame = pd.read_csv(root / "report" / "tables" / f"{name}.csv", dtype=str, keep_default_na=False)
        shown = set(frame[keys].itertuples(index=False, name=None))
        assert shown == {(x, y) for x in named[a] for y in named[b]}, (name, shown)
    for key, values in named.items():
        assert f"- `{key}`: {', '.join(values)}" in text


def test_python_m_analysis_rebuilds_the_same_report(sweep, tmp_path):
    root, _ = sweep
    out = subprocess.run([sys.executable, "-m", "analysis", str(root), "--out", str(tmp_path / "again")], cwd=ROOT,
                         env=ENV, text=True, capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    first = (root / "report" / "REPORT.md").read_text().replace("../", "")
    assert (tmp_path / "again" / "REPORT.md").read_text().split("## Findings")[1].split("<details>")[0] == \
        first.split("## Findings")[1].split("<details>")[0]


def test_a_sweep_read_from_config_json_alone_has_the_same_arms(sweep, tmp_path):
    """Without .hydra/ (a sweep copied as `cp job/*`, or run without Hydra's record) each job's config comes from the
    trainer's config.json, which records the job's own out_dir and logger.name: they must not make every job an arm."""
    root, _ = sweep
    bare = tmp_path / "bare"
    shutil.copytree(root, bare, ignore=shutil.ignore_patterns(".hydra", "report"))
    assert not list(bare.glob("*/.hydra")) and len({json.loads(p.read_text())["out_dir"]
                                                    for p in bare.glob("*/config.json")}) > 1
    out = subprocess.run([sys.executable, "-m", "analysis", str(bare), "--out", str(tmp_path / "report")], cwd=ROOT,
                         env=ENV, text=True, capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]

    def findings(path):
        return path.read_text().replace("../", "").split("## Findings")[1].split("<details>")[0]

    assert findings(tmp_path / "report" / "REPORT.md") == findings(root / "report" / "REPORT.md")
