"""The built-in model ships in the package: it loads with nothing built or cached, a wheel carries it, and its
recipe still makes a model of the same quality (slow: a whole build, run by CI)."""

import dataclasses
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from experiments.build_tiny import SAMPLES, TOLERANCE, held_out_accuracy
from grpo_lab.model.load import load_policy
from grpo_lab.model.tiny import RECIPE_FILE, RECIPE_VERSION, WEIGHTS, TinySpec, build_tiny, tiny_weights

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_model_loads_with_nothing_built_or_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no cache to find or fill
    model, tok = load_policy("tiny", None, device="cpu", dtype="float32")
    assert sum(p.numel() for p in model.parameters()) == 667_264 and tok.vocab_size == 84
    assert not any(tmp_path.iterdir())
    recipe = json.loads((tiny_weights() / RECIPE_FILE).read_text())
    # the shipped weights are this recipe's: a changed recipe must be rebuilt and shipped (and the version bumped)
    assert recipe["recipe_version"] == RECIPE_VERSION
    assert recipe["spec"] == json.loads(json.dumps(dataclasses.asdict(TinySpec())))


def test_missing_weights_are_one_line_with_the_way_out(monkeypatch, tmp_path):
    monkeypatch.setattr("grpo_lab.model.tiny.WEIGHTS", tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match=r"weights are missing .* python -m experiments.build_tiny --out DIR"):
        load_policy("tiny", None, device="cpu")


def test_a_wheel_carries_the_weights(tmp_path):
    """The wheel built from the tree (as pip builds it) holds every file of the shipped folder."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("grpo_lab", "analysis", "experiments", "fixtures"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                          str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("grpo_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"grpo_lab/model/tiny_weights/{p.name}" for p in WEIGHTS.iterdir()}
    assert {"grpo_lab/model/tiny_weights/model.safetensors", "grpo_lab/model/tiny_weights/vocab.json"} <= shipped
    assert shipped <= names, sorted(shipped - names)


@pytest.mark.slow
def test_the_recipe_makes_a_model_of_the_shipped_quality(tmp_path):
    """A whole build at another seed (and whatever threads and machine this is) against the shipped model:
    held-out sampled accuracy per level within TOLERANCE on the same prompts and random numbers."""
    threads = torch.get_num_threads()
    built = build_tiny(tmp_path / "tiny", dataclasses.replace(TinySpec(), warm_seed=TinySpec().warm_seed + 1))
    ours, shipped = held_out_accuracy(built), held_out_accuracy(tiny_weights())
    recorded = json.loads((tiny_weights() / RECIPE_FILE).read_text())["held_out_accuracy"]
    assert json.loads((built / RECIPE_FILE).read_text())["threads"] == threads
    for level, accuracy in shipped.items():
        assert abs(accuracy - recorded[level]) <= TOLERANCE, (level, accuracy, recorded)  # the record is honest
        assert abs(ours[level] - accuracy) <= TOLERANCE, (level, ours, shipped, f"{SAMPLES} samples a prompt")
