"""Every kind that comes in kinds is extended the same way: one module, one registry line, one yaml. Each test
copies the project into a temporary folder, adds a throwaway member there as a developer would (and nothing
else: at most three files touched), and trains with it through the command line; the run's tables show the
member did what it says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["max_steps=2", "prompts_per_step=2", "sampler.group_size=4", "eval.n=2", "checkpoint_every=100"]
ARITHMETIC = ["task.levels=[1,2]", "task.train_per_level=4", "task.eval_per_level=2"]


def project_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    for part in ("grpo_lab", "experiments", "conf"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def add_member(copy: Path, module: str, code: str, registry: str, import_line: str, anchor: str, member: str,
               yaml: str, preset: str) -> list[str]:
    """Write the member's module, its line in the registry (its import, and its class beside `anchor` in the
    tuple the registry is made from) and its preset; returns the files touched."""
    (copy / module).write_text(code)
    register(copy, registry, anchor, f"{anchor}, {member}", import_line)
    (copy / yaml).write_text(preset)
    return [module, registry, yaml]


def register(copy: Path, registry: str, anchor: str, replaced: str, import_line: str) -> None:
    """The member's line in the registry: `anchor` (where the registry lists its members) replaced by `replaced`,
    and `import_line` after the registry's last import of the project."""
    path = copy / registry
    text = path.read_text()
    assert anchor in text, f"{registry} has no {anchor!r}"
    path.write_text(_with_import(text.replace(anchor, replaced, 1), import_line))


def _with_import(text: str, line: str) -> str:
    """`text` with `line` after its last top-level import of the project (`from grpo_lab...`, `from analysis...`)."""
    lines = text.splitlines(keepends=True)
    package = line.split()[1].split(".")[0]
    last = max(i for i, ln in enumerate(lines) if ln.startswith(f"from {package}"))
    return "".join(lines[:last + 1] + [line + "\n"] + lines[last + 1:])


def train(copy: Path, run: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "experiments.train", *SMALL, *overrides, f"hydra.run.dir={run}"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=600)


def groups(run: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in sorted((run / "groups").glob("part-*.parquet"))], ignore_index=True)


def test_a_sampler_is_one_module_one_line_one_yaml(tmp_path):
    copy = project_copy(tmp_path)
    touched = add_member(
        copy, "grpo_lab/samplers/first_only.py",
        '"""A throwaway sampler: fixed groups, of which only the first of each step trains."""\n\n'
        "from grpo_lab.samplers.base import Draw, Sampler, use\n\n\n"
        "class FirstOnlySampler(Sampler):\n"
        '    name = "first_only"\n\n'
        "    def draw(self, draw_round, prompts: int) -> Draw:\n"
        "        groups = draw_round(self.stream.take(prompts), 0)\n"
        "        use(groups[:1])\n"
        "        return Draw(groups, [[groups[0]]])\n",
        "grpo_lab/samplers/__init__.py", "from grpo_lab.samplers.first_only import FirstOnlySampler",
        "    FixedSampler, ResampleOnTieSampler", "FirstOnlySampler", "conf/sampler/first_only.yaml",
        "name: first_only\n")
    assert len(touched) <= 3
    out = train(copy, tmp_path / "run", "sampler=first_only", *ARITHMETIC)
    assert out.returncode == 0, out.stderr[-2000:]
    drawn = groups(tmp_path / "run")
    assert drawn.groupby("step")["used"].sum().tolist() == [1, 1] and len(drawn) == 4
    assert json.loads((tmp_path / "run" / "config.json").read_text())["sampler.name"] == "first_only"


def test_an_advantage_rule_with_a_key_is_one_module_one_line_one_yaml(tmp_path):
    """A throwaway rule with a key of its own (`algo.centered.scale`): the config's `algo` block gains it from the
    registry, its check refuses a bad value before the run starts, and it is refused where the rule is not chosen."""
    copy = project_copy(tmp_path)
    touched = add_member(
        copy, "grpo_lab/advantage/centered.py",
        '"""A throwaway rule: reward minus the group mean, times a scale of its own."""\n\n'
        "from dataclasses import dataclass\n\n"
        "from grpo_lab.advantage.base import AdvantageRule, no_direction\n"
        "from grpo_lab.errors import require\n\n\n"
        "@dataclass\n"
        "class CenteredSettings:\n"
        "    scale: float = 1.0  # what the centred rewards are multiplied by\n\n\n"
        "class CenteredRule(AdvantageRule):\n"
        '    name = "centered"\n'
        "    settings_type = CenteredSettings\n"
        "    reads_std = False\n\n"
        "    @classmethod\n"
        "    def check(cls, algo):\n"
        '        require(algo.centered.scale > 0, "algo.centered.scale", algo.centered.scale, "must be > 0")\n\n'
        "    @classmethod\n"
        "    def advantages(cls, rewards, correct, *, std, eps, max_reward, settings):\n"
        "        return settings.scale * (rewards - rewards.mean(-1, keepdim=True)), no_direction(rewards)\n",
        "grpo_lab/advantage/__init__.py", "from grpo_lab.advantage.centered import CenteredRule",
        "(GrpoRule, NgrpoRule, RlZvpRule", "CenteredRule", "conf/algo/centered.yaml", "advantage: centered\n")
    assert len(touched) <= 3
    out = train(copy, tmp_path / "run", "algo=centered", "algo.centered.scale=2.5", *ARITHMETIC[1:],
                "task.levels=[2,3]")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["algo.centered.scale"] == 2.5
    drawn = groups(tmp_path / "run")
    for rewards, advantages in zip(drawn["rewards"], drawn["advantages"]):
        r = np.asarray(rewards, np.float64)
        np.testing.assert_allclose(advantages, 2.5 * (r - r.mean()), atol=1e-6)
    assert not drawn["tie"].all()  # some group's advantages were not all zero
    refused = train(copy, tmp_path / "refused", "algo=centered", "algo.std=sample", *ARITHMETIC)
    assert refused.returncode != 0 and "algo.std" in refused.stderr  # a key it does not read is refused
    bad = train(copy, tmp_path / "bad", "algo=centered", "algo.centered.scale=0", *ARITHMETIC)
    assert "algo.centered.scale=0.0 is invalid: must be > 0" in bad.stderr and not (tmp_path / "bad").exists()
    unread = train(copy, tmp_path / "unread", "algo.centered.scale=3", *ARITHMETIC)
    assert unread.returncode != 0 and "read only by algo.advantage=centered" in unread.stderr, unread.stderr[-2000:]


def test_a_task_with_a_key_is_one_module_one_line_one_yaml(tmp_path):
    """A throwaway task with a key of its own (`task.doubles.upto`), read by its build and its sizes, checked by its
    `check`, refused under another task."""
    copy = project_copy(tmp_path)
    touched = add_member(
        copy, "grpo_lab/tasks/doubles.py",
        '"""A throwaway task: a+a= for a below task.doubles.upto, every tenth held out."""\n\n'
        "from dataclasses import dataclass\n\n"
        "from grpo_lab.errors import require\n"
        "from grpo_lab.tasks.base import Problem, Task, TaskKind\n\n\n"
        "@dataclass\n"
        "class DoublesSettings:\n"
        "    upto: int = 50  # a runs over [0, upto)\n\n\n"
        "class Doubles(TaskKind):\n"
        '    name = "doubles"\n'
        "    settings_type = DoublesSettings\n\n"
        "    @classmethod\n"
        "    def check(cls, cfg):\n"
        "        upto = cfg.task.doubles.upto\n"
        '        require(upto >= 20, "task.doubles.upto", upto, "must be >= 20 (two held-out problems)")\n\n'
        "    @classmethod\n"
        "    def sizes(cls, cfg):\n"
        "        held = -(-cfg.task.doubles.upto // 10)\n"
        "        return cfg.task.doubles.upto - held, held\n\n"
        "    @classmethod\n"
        "    def build(cls, cfg):\n"
        '        problems = [Problem(f"d{a}", f"{a}+{a}=", str(2 * a), "1" if a < 10 else "2")\n'
        "                    for a in range(cfg.doubles.upto)]\n"
        '        return Task("doubles", tuple(p for p in problems if int(p.prompt_id[1:]) % 10),\n'
        '                    tuple(p for p in problems if not int(p.prompt_id[1:]) % 10), "integer")\n',
        "grpo_lab/tasks/__init__.py", "from grpo_lab.tasks.doubles import Doubles",
        "(Arithmetic, Mathset", "Doubles", "conf/task/doubles.yaml", "name: doubles\n")
    assert len(touched) <= 3
    out = train(copy, tmp_path / "run", "task=doubles", "task.doubles.upto=30")
    assert out.returncode == 0, out.stderr[-2000:]
    drawn = groups(tmp_path / "run")
    assert drawn["prompt_id"].str.fullmatch(r"d\d+").all() and set(drawn["difficulty"]) <= {"1", "2"}
    held = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "run" / "eval").glob("part-*.parquet"))])
    assert set(held["prompt_id"]) == {"d0", "d10", "d20"}
    bad = train(copy, tmp_path / "bad", "task=doubles", "task.doubles.upto=5")
    assert "task.doubles.upto=5 is invalid: must be >= 20" in bad.stderr and not (tmp_path / "bad").exists()
    unread = train(copy, tmp_path / "unread", "task.doubles.upto=40", *ARITHMETIC)
    assert unread.returncode != 0 and "read only by task=doubles" in unread.stderr, unread.stderr[-2000:]


@pytest.fixture(autouse=True)
def _no_stray_imports():
    """The copies are imported only by their own subprocesses: this process keeps the project's modules."""
    before = {name: getattr(module, "__file__", None) for name, module in sys.modules.items()
              if name.startswith("grpo_lab")}
    yield
    after = {name: getattr(module, "__file__", None) for name, module in sys.modules.items() if name in before}
    assert after == {k: v for k, v in before.items() if k in after}


def test_a_report_section_is_one_module_and_one_line(tmp_path):
    """A section that reads only the tables: its module, and its line in the report's ordered list (with its
    import); the report built by the copy has it where the line puts it, and every other section as before."""
    from fixtures.synthetic import two_sampler_sweep

    copy = tmp_path / "project"
    shutil.copytree(ROOT / "analysis", copy / "analysis", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "analysis/sections/prompts_drawn.py").write_text(
        '"""A throwaway section: the distinct prompts the jobs drew."""\n\n'
        "from analysis.sections.section import Section\n\n\n"
        "def section(tables, ctx):\n"
        '    return Section(text=f"## Prompts drawn\\n\\n{tables.groups[\'prompt_id\'].nunique()} '
        'distinct prompts.")\n')
    anchor = '("health", health.section),'
    register(copy, "analysis/report.py", anchor, f'{anchor} ("prompts_drawn", prompts_drawn.section),',
             "from analysis.sections import prompts_drawn")
    sweep = two_sampler_sweep(tmp_path / "sweep")
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    for name, cwd in (("theirs", copy), ("ours", ROOT)):
        out = subprocess.run([sys.executable, "-m", "analysis", str(sweep), "--out", str(tmp_path / name)], cwd=cwd,
                             env=env if name == "theirs" else {**os.environ, "OMP_NUM_THREADS": "1"},
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
    details = (tmp_path / "theirs" / "DETAILS.md").read_text()
    prompts = groups(sweep / "0")["prompt_id"].nunique()
    assert "## Prompts drawn" in details and f"{prompts} distinct prompts." in details
    assert details.index("## Prompts drawn") > details.index("## Training health")
    ours = (tmp_path / "ours" / "DETAILS.md").read_text()
    assert details.replace(f"## Prompts drawn\n\n{prompts} distinct prompts.\n\n", "") \
        .replace(", Prompts drawn", "") == ours.replace(", Prompts drawn", "")


def test_an_engine_is_one_module_and_one_line(tmp_path):
    """A throwaway engine with a key of its own (it wraps the hf engine and counts its draws into a file beside the
    run): its module and its line in the engines' registry, no preset (`rollout.engine=counting` chooses it); its
    key is checked before the run starts and refused where it is not chosen."""
    copy = project_copy(tmp_path)
    (copy / "grpo_lab/rollout/counting_engine.py").write_text(
        '"""A throwaway engine: the hf engine, its draws counted into counting.json beside the run."""\n\n'
        "import json\n"
        "from dataclasses import dataclass\n"
        "from pathlib import Path\n\n"
        "from grpo_lab.errors import require\n"
        "from grpo_lab.rollout.engine import EngineSettings\n"
        "from grpo_lab.rollout.hf_engine import HFEngine\n\n\n"
        "@dataclass\n"
        "class CountingSettings(EngineSettings):\n"
        "    label: int = 1  # written beside the counts\n\n"
        "    def check(self, key):\n"
        '        require(self.label >= 1, f"{key}.label", self.label, "must be >= 1")\n\n\n'
        "class CountingEngine(HFEngine):\n"
        '    name = "counting"\n'
        "    settings_type = CountingSettings\n\n"
        "    def __init__(self, model, tokenizer, cfg, device):\n"
        "        super().__init__(model, tokenizer, cfg, device)\n"
        '        self.file = Path(cfg.out_dir).parent / "counting.json"\n'
        '        self.counts = dict(label=cfg.rollout.counting.label, draws=0, rows=0, syncs=0)\n\n'
        "    def draw(self, prompts, group_size, sampling, generator):\n"
        '        self.counts["draws"] += 1\n'
        '        self.counts["rows"] += len(prompts) * group_size\n'
        "        return super().draw(prompts, group_size, sampling, generator)\n\n"
        "    def sync(self, model):\n"
        '        self.counts["syncs"] += 1\n'
        "        super().sync(model)\n\n"
        "    def close(self):\n"
        "        self.file.write_text(json.dumps(self.counts))\n")
    register(copy, "grpo_lab/rollout/engines.py", "(HFEngine, VLLMEngine", "(HFEngine, VLLMEngine, CountingEngine",
             "from grpo_lab.rollout.counting_engine import CountingEngine")
    out = train(copy, tmp_path / "run", "rollout.engine=counting", "rollout.counting.label=7", *ARITHMETIC)
    assert out.returncode == 0, out.stderr[-2000:]
    counts = json.loads((tmp_path / "counting.json").read_text())
    steps = pd.read_parquet(tmp_path / "run" / "steps")
    evals = pd.read_parquet(tmp_path / "run" / "eval")
    assert counts["label"] == 7 and counts["rows"] == int(steps["samples_total"].max()) + len(evals)
    assert counts["syncs"] == int((steps["opt_steps"] > 0).sum())
    refused = train(copy, tmp_path / "refused", "rollout.engine=counting", "rollout.counting.label=0", *ARITHMETIC)
    assert refused.returncode != 0 and not (tmp_path / "refused").exists()
    assert "rollout.counting.label=0 is invalid: must be >= 1" in refused.stderr, refused.stderr[-2000:]
    unread = train(copy, tmp_path / "unread", "rollout.counting.label=3", *ARITHMETIC)
    assert unread.returncode != 0 and "read only by rollout.engine=counting" in unread.stderr, unread.stderr[-2000:]


def test_an_ingest_source_is_one_module_and_one_line(tmp_path):
    """A throwaway tool whose logs are `<step>.csv` files (prompt, completion, reward; a prompt's rows in a row):
    its module, declaring its own option and example, and its line in the ingest's registry; `--help` shows both,
    and its run ingests with the groups the files hold."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "analysis", copy / "analysis", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "analysis/ingest/csvlog.py").write_text(
        '"""A throwaway tool: <step>.csv files of prompt, completion and reward, a prompt\'s rows in a row."""\n\n'
        "from pathlib import Path\n\n"
        "import pandas as pd\n\n"
        "from analysis.ingest.grouping import common_size, consecutive_groups\n"
        "from analysis.ingest.logs import Logged\n"
        "from analysis.ingest.tool import Option, Tool\n\n\n"
        "def read(source: Path, group_size=None, delimiter=','):\n"
        "    frames = []\n"
        '    for path in sorted(source.glob("*.csv"), key=lambda p: int(p.stem)):\n'
        "        frame = pd.read_csv(path, sep=delimiter)\n"
        '        frames.append(frame.assign(step=int(path.stem), where=[f"{path.name}:{i + 2}" for i in '
        "range(len(frame))]))\n"
        "    samples = pd.concat(frames, ignore_index=True)\n"
        '    g = group_size or common_size(samples, "prompt", "the group size")\n'
        '    samples["group"] = consecutive_groups(samples, "prompt", g, "the group size")\n'
        '    files = [p.name for p in source.glob("*.csv")]\n'
        '    return Logged(tool="csvlog", version=None, source=str(source), files=files, samples=samples,\n'
        "                  held_out=pd.DataFrame(columns=samples.columns), reward_columns=['reward'])\n\n\n"
        'TOOL = Tool(name="csvlog", title="csvlog", source="the folder of <step>.csv files",\n'
        '            example="python -m analysis.ingest csvlog logs/ --out runs/csv --delimiter ;", read=read,\n'
        '            options=(Option("delimiter", "the files\' column separator"),))\n')
    register(copy, "analysis/ingest/__init__.py", "nemo_rl.TOOL", "nemo_rl.TOOL, csvlog.TOOL",
             "from analysis.ingest import csvlog")
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = np.random.default_rng(0)
    rewards = {}
    for step in (1, 2, 3):
        rows = [(f"q{step}-{k}", f"reply {j}", float(rng.random() < 0.5)) for k in range(3) for j in range(4)]
        rewards[step] = [r for _, _, r in rows]
        pd.DataFrame(rows, columns=["prompt", "completion", "reward"]).to_csv(logs / f"{step}.csv", sep=";",
                                                                            index=False)
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "analysis.ingest", "csvlog"]
    shown = subprocess.run([*cli, "--help"], cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "--delimiter" in shown.stdout and "--out runs/csv --delimiter ;" in shown.stdout
    out = subprocess.run([*cli, str(logs), "--out", str(tmp_path / "run"), "--delimiter", ";"], cwd=copy, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    ingested = groups(tmp_path / "run")
    assert len(ingested) == 9 and set(ingested["group_size"]) == {4}
    assert [x for r in ingested["rewards"] for x in r] == [x for s in (1, 2, 3) for x in rewards[s]]
