"""The README's "Your own study" command runs as printed (shrunk by overrides appended after it): a local
model folder, a local JSONL of problems, two samplers over three seeds at one sample budget, ending in a
report that compares them. The command is read out of README.md, so the README cannot rot."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import tomllib

from fixtures.models import build_chat_model

ROOT = Path(__file__).resolve().parent.parent


def readme_command(section: str) -> list[str]:
    """The first bash block under a README heading, as arguments (line continuations joined)."""
    text = (ROOT / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", body, re.S).group(1)
    return shlex.split(block.replace("\\\n", " "))


def test_your_own_study_runs_as_the_readme_prints_it(tmp_path):
    args = readme_command("Your own study")
    assert args[:3] == ["python", "-m", "experiments.train"]
    model = build_chat_model(tmp_path / "model")
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join(json.dumps({"problem": f"What is ${a} + {b}$?", "answer": str(a + b),
                                              "level": 1 + (a > 4)}) for a in range(10) for b in range(3)))
    command = [a.replace("/path/to/model", str(model)).replace("/path/to/problems.jsonl", str(problems))
               for a in args[3:]]
    sweep = tmp_path / "sweep"
    small = ["max_samples=48", "prompts_per_step=2", "sampler.group_size=4", "rollout.max_new_tokens=8",
             "eval.every_samples=24", "eval.n=2", "reward.workers=1", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "experiments.train", *command, *small], cwd=ROOT, env=env,
                         text=True, capture_output=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if (p / "run.json").exists())
    assert len(jobs) == 6  # two samplers x three seeds
    samplers = set()
    for job in jobs:
        assert json.loads((job / "run.json").read_text())["status"] == "done"
        config = json.loads((job / "config.json").read_text())
        samplers.add(config["sampler.name"])
        assert config["model.path"] == str(model) and config["task.chat_template"] is True
        drawn = pd.read_parquet(job / "groups")["samples_total"].max()
        assert 48 <= drawn < 48 + 2 * 4 * 4  # the budget, overshot by at most one step's draw
    assert samplers == {"fixed", "resample_on_tie"}
    report = (sweep / "report" / "REPORT.md").read_text()
    assert "fixed" in report and "resample_on_tie" in report


def test_the_readme_test_command_installs_what_ci_installs():
    """A new user runs the tests CI runs: every `pip install` of .ci/run is in the README's test command, in the
    same order, and the command ends in the same pytest invocation, which CI widens to the heavy tests only."""
    text = (ROOT / "README.md").read_text()
    command = next(line for line in re.findall(r"```bash\n(.*?)```", text, re.S)[1].splitlines() if "pytest" in line)
    readme_installs = [part.strip() for part in command.split("&&") if part.strip().startswith("pip install")]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_installs = [line.replace(" --quiet", "").strip() for line in ci
                   if line.startswith("pip install") and "--upgrade pip" not in line]
    assert readme_installs == ci_installs
    assert command.rstrip().endswith("python -m pytest -q")
    pytest_lines = [line.strip() for line in ci if "pytest" in line and not line.startswith("#")]
    assert pytest_lines == ["python -m pytest -q -m 'not slow'"]  # the README's run and the tests marked heavy
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-m 'not slow and not heavy'" in addopts


def test_every_test_marked_heavy_or_slow_by_name_exists():
    """A renamed test or file would leave its entry naming nothing (and the test in the quick run unseen)."""
    from conftest import HEAVY, SLOW

    for entry in sorted(SLOW | HEAVY):
        path, _, test = entry.partition("::")
        assert (ROOT / path).is_file(), entry
        if test:
            assert re.search(rf"^def {re.escape(test.split('[')[0])}\(", (ROOT / path).read_text(), re.M), entry


def test_the_smollm2_lines_compose_as_printed():
    """The own-study section's SmolLM2 lines: `model=smollm2` is the model line it names, and its task.shots
    override, pasted as printed, gives one worked example whose answer the reward reads."""
    from experiments.common import preflight, register_configs
    from grpo_lab.rewards.rules import final_answer

    register_configs()
    text = (ROOT / "README.md").read_text()
    typed = shlex.split(re.search(r"`('task\.shots=[^`]+')`", text).group(1))[0]  # bash's quoting, as a shell does
    model = re.search(r"is `(model\.path=\S+) (model\.gguf_file=\S+)`", text).groups()
    [job], error = preflight("train", ["model=smollm2", typed])
    assert error is None, error
    assert [f"model.path={job.model.path}", f"model.gguf_file={job.model.gguf_file}"] == list(model)
    [(question, answer)] = job.task.shots
    assert question.endswith("Put the final number in \\boxed{}.") and final_answer(answer, "boxed") == "5"
