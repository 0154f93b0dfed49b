"""Nothing loaded from disk runs code: state.pt holds plain containers and is read with
weights_only=True, a planted payload is refused in one line by resume and never loaded by experiments.evaluate
(which reads only the weights there), an fsdp checkpoint's DCP metadata is unpickled with DCP's own records alone
allowed, a model folder with custom code (auto_map) is refused unless model.trust_remote_code=true, and no other
load exists anywhere in the tree."""

import ast
import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from fixtures.models import build_chat_model
from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import InputError
from grpo_lab.model.load import load_policy
from grpo_lab.rollout.generate import Rollout
from grpo_lab.run.checkpoints import check_world_size, read_state
from grpo_lab.run.plain import TAG, UnsafeCheckpoint, from_plain, to_plain
from grpo_lab.run.sharded import SafePlanner, SafeReader, check_metadata
from grpo_lab.tasks import Problem

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
TINY = ["prompts_per_step=2", "sampler.group_size=2", "task.levels=[1,2]", "task.train_per_level=4",
        "task.eval_per_level=2", "eval=none", "checkpoint_every=1", "threads=1"]


class Payload:
    """What a hostile state.pt holds: unpickling it calls open(marker, "w"), creating the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=ENV, text=True, capture_output=True,
                          timeout=600)


def _roundtrip(value):
    buffer = io.BytesIO()
    torch.save(to_plain(value), buffer)
    buffer.seek(0)
    return from_plain(torch.load(buffer, weights_only=True))


def _same(a, b) -> bool:
    """Equal, and of the same types all the way down (a numpy float32 is not a Python float)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, set | frozenset):
        return a == b
    if isinstance(a, Rollout):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def test_every_kind_of_state_comes_back_exactly_through_a_weights_only_load():
    rng = np.random.default_rng(3)
    rng.random(5)
    np.random.seed(7)
    rollout = Rollout(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3), torch.arange(6).view(2, 3),
                      torch.ones(2, 3), torch.randn(2, 3), ["12", "1"], torch.tensor([3, 2]),
                      torch.tensor([False, True]), 2)
    state = {
        "python_rng": random.getstate(), "numpy_rng": np.random.get_state(), "bits": rng.bit_generator.state,
        "arrays": [np.arange(4, dtype=np.uint32), np.array([[0.5, np.nan]], dtype=np.float32), np.zeros(0, bool),
                   np.array([1 + 2j]), np.array(["a", "bc"]), np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2]],
        "scalars": [np.float64(0.1), np.float32(0.25), np.int64(-3), np.bool_(True), np.str_("x"), 2**100, -0.0],
        "sets": [{1, 2}, frozenset({"a"}), {np.int64(4)}],
        "keys": {(1, "a"): 1, np.int64(3): "numpy key", TAG: "a key that is the tag", None: [None]},
        "buffer": [{"problem": Problem("p1", "1+1=", "2", "1"), "samples": rollout, "rewards": np.array([1.0, 0.0])}],
        "nested": ((1, [2.5, {"x": b"bytes"}]),),
    }
    back = _roundtrip(state)
    assert _same(back, state)
    assert back["buffer"][0]["problem"] == state["buffer"][0]["problem"]
    np.random.set_state(back["numpy_rng"])  # the restored states drive the generators exactly as before
    assert np.random.random() == (np.random.seed(7), np.random.random())[1]
    again = np.random.default_rng()
    again.bit_generator.state = back["bits"]
    assert again.random() == rng.random()


def test_what_cannot_be_plain_is_refused_naming_where_it_is():
    class Unknown:
        pass
    with pytest.raises(TypeError, match=r"state\['sampler'\]\['memory'\]\[1\]: a .*Unknown cannot be saved"):
        to_plain({"sampler": {"memory": [1, Unknown()]}})
    with pytest.raises(TypeError, match="dtype object"):
        to_plain(np.array([{}], dtype=object))
    with pytest.raises(ValueError, match="unknown plain-state tag 'class'"):
        from_plain({TAG: "class", "type": "os.system", "value": "echo"})
    with pytest.raises(ValueError, match="fields"):  # a saved dataclass cannot set attributes it does not declare
        from_plain({TAG: "dataclass", "type": "Problem", "value": {"prompt_id": "a", "__class__": 1}})


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A real run of two steps, a checkpoint at each, made by the command line."""
    run = tmp_path_factory.mktemp("safe") / "run"
    out = _cli("experiments.train", "max_steps=2", *TINY, f"hydra.run.dir={run}")
    assert out.returncode == 0, out.stderr[-3000:]
    return run


def _plant(run: Path, tmp_path: Path, step: int = 2) -> tuple[Path, Path]:
    """A copy of the run whose checkpoint at `step` holds a payload in state.pt (and no counters.json, as a
    checkpoint written before it existed), and the marker the payload would create."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    marker = tmp_path / "payload-ran"
    ckpt = copy / "checkpoints" / f"step-{step:06d}"
    torch.save({"step": step, "world_size": 1, "counters": Payload(marker)}, ckpt / "state.pt")
    (ckpt / "counters.json").unlink()
    return copy, marker


def _files(folder: Path) -> dict[str, bytes]:
    """Every file's bytes; config.json's without `out_dir`, which a start of a copied run points at its new place."""
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    config = json.loads(files.pop("config.json"))
    return {**files, "config.json": json.dumps({k: v for k, v in config.items() if k != "out_dir"}).encode()}


def _damage(ckpt: Path, how: str, marker: Path) -> str:
    """The last checkpoint damaged one way; what the refusal must name."""
    weights, state = ckpt / "model.safetensors", ckpt / "state.pt"
    if how == "payload in state.pt":
        torch.save({"step": 2, "world_size": 1, "counters": Payload(marker)}, state)
        return f"{state}: refused: it holds pickled Python objects (io.open)"
    if how == "state.pt truncated":
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
        return f"{state}: not a readable checkpoint state"
    if how == "weights truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        return f"{weights}: truncated"
    weights.unlink()
    return f"{weights}: missing"


@pytest.mark.parametrize("how", ["payload in state.pt", "state.pt truncated", "weights truncated", "weights missing"])
def test_a_resume_from_a_damaged_checkpoint_is_refused_before_anything_is_written(finished_run, tmp_path, how):
    """Every file of the run, Hydra's records and run.json included, is as it was: the checkpoint is read (its
    state safely, its weights as far as their headers) before the start is accepted."""
    run, marker = tmp_path / "run", tmp_path / "payload-ran"
    shutil.copytree(finished_run, run)
    says = _damage(run / "checkpoints" / "step-000002", how, marker)
    before = _files(run)
    out = _cli("experiments.train", "max_steps=4", *TINY, f"hydra.run.dir={run}")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {says}"), last
    assert _files(run) == before and not marker.exists()


def test_a_planted_payload_is_never_loaded_by_evaluate(finished_run, tmp_path):
    """Evaluation reads a checkpoint's weights (safetensors) and its counters; a state.pt that would run code is
    refused unread, said in a warning, and the weights are evaluated (their samples drawn not recorded there)."""
    run, marker = _plant(finished_run, tmp_path)
    out = _cli("experiments.evaluate", f"run_dir={run}", "n=3", "steps=[2]")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "state.pt: refused: it holds pickled Python objects" in out.stderr and "Traceback" not in out.stderr
    assert not marker.exists()
    rows = pq.read_table(next((run / "eval").glob("part-000002-n3-*.parquet"))).to_pandas()
    assert len(rows) and rows["samples_total"].isna().all()


def test_an_older_checkpoint_with_pickled_numpy_state_is_refused_in_one_line(finished_run, tmp_path):
    """What every checkpoint of the previous version holds: np.random.get_state()'s array, pickled."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    ckpt = run / "checkpoints" / "step-000002"
    state = read_state(ckpt)
    torch.save({**state, "numpy_rng": np.random.get_state()}, ckpt / "state.pt")
    with pytest.raises(UnsafeCheckpoint, match=r"state.pt: refused: .*numpy.*an older grpo-lab's checkpoint"):
        check_world_size(ckpt, 1)


def test_dcp_metadata_is_read_with_its_own_records_only(tmp_path):
    import torch.distributed.checkpoint as dcp

    optim = tmp_path / "ckpt" / "optim"
    saved = {"optim": {"state": {"w": {"exp_avg": torch.arange(3.0), "step": torch.tensor(2.0)}},
                       "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": ["w"], "foreach": None}]}}
    with pytest.warns(UserWarning):  # no process group: DCP saves as one process
        dcp.save(saved, checkpoint_id=optim)
    into = {"optim": {"state": {"w": {"exp_avg": torch.zeros(3), "step": torch.tensor(0.0)}},
                      "param_groups": [{"lr": 0.0, "betas": (0.0, 0.0), "params": ["w"], "foreach": None}]}}
    with pytest.warns(UserWarning):
        dcp.load(into, storage_reader=SafeReader(optim), planner=SafePlanner())
    assert into["optim"]["param_groups"] == saved["optim"]["param_groups"]
    assert torch.equal(into["optim"]["state"]["w"]["exp_avg"], torch.arange(3.0))

    import pickle
    marker = tmp_path / "payload-ran"
    (optim / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(UnsafeCheckpoint, match=r"optim/.metadata: refused: it names io.open"):
        check_metadata(optim)
    torch.save(to_plain({"step": 2, "world_size": 1, "strategy": "fsdp"}), optim.parent / "state.pt")
    with pytest.raises(UnsafeCheckpoint, match="optim/.metadata"):
        check_world_size(optim.parent, 1)  # before any rank loads anything
    assert not marker.exists()


# --- model.trust_remote_code ---------------------------------------------------------------------------------

EVIL = """import os
open(os.environ["GRPO_TEST_MARKER"], "w").write("custom code ran")
from transformers import Qwen2ForCausalLM


class EvilForCausalLM(Qwen2ForCausalLM):
    pass
"""


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-chat")


def _custom(chat_model: Path, tmp_path: Path, file: str = "config.json") -> Path:
    """A copy of a real model folder whose `file` maps an Auto class to its own modeling_evil.py."""
    folder = tmp_path / "custom"
    shutil.copytree(chat_model, folder)
    (folder / "modeling_evil.py").write_text(EVIL)
    data = json.loads((folder / file).read_text())
    key, value = ("AutoModelForCausalLM", "modeling_evil.EvilForCausalLM") if file == "config.json" else \
        ("AutoTokenizer", ["modeling_evil.EvilTokenizer", None])
    data["auto_map"] = {key: value}
    (folder / file).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_a_model_folder_with_custom_code_is_refused_before_anything_loads(chat_model, tmp_path, file, monkeypatch):
    folder = _custom(chat_model, tmp_path, file)
    marker = tmp_path / "custom-ran"
    monkeypatch.setenv("GRPO_TEST_MARKER", str(marker))
    cfg = TrainConfig(out_dir=str(tmp_path / "run"))
    cfg.model.name, cfg.model.path = "hf", str(folder)
    with pytest.raises(InputError, match=rf"{file}: its auto_map names the folder's own Python \(modeling_evil.Evil"
                                         r".*set model.trust_remote_code=true only if you trust that code"):
        validate(cfg)  # the config check, before any model loads
    with pytest.raises(InputError, match="model.trust_remote_code=true"):
        load_policy("hf", str(folder), "cpu")  # and the loader itself, for callers that skip the check
    out = _cli("experiments.train", "model=local", f"model.path={folder}", "max_steps=1", *TINY,
               f"hydra.run.dir={tmp_path / 'cli'}")
    assert out.returncode != 0 and out.stderr.strip().splitlines()[-1].startswith("config error: ")
    assert "auto_map" in out.stderr and "Traceback" not in out.stderr and "[y/N]" not in out.stdout + out.stderr
    assert not marker.exists() and not (tmp_path / "cli").exists()


def test_trust_remote_code_true_runs_the_folders_code_as_asked(chat_model, tmp_path):
    """The payload above is live: with the key set, transformers imports modeling_evil.py (the marker appears)."""
    folder = _custom(chat_model, tmp_path)
    marker = tmp_path / "custom-ran"
    code = ("import sys; from grpo_lab.model.load import load_policy; "
            "m, _ = load_policy('hf', sys.argv[1], 'cpu', trust_remote_code=True); print(type(m).__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=ROOT, text=True, capture_output=True,
                         env={**ENV, "GRPO_TEST_MARKER": str(marker), "HF_MODULES_CACHE": str(tmp_path / "modules")},
                         stdin=subprocess.DEVNULL, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["EvilForCausalLM"] and marker.read_text() == "custom code ran"


# --- the whole tree ------------------------------------------------------------------------------------------

SCANNED = ("grpo_lab", "experiments", "analysis", "benchmarks", "fixtures", "tests")
# the one restricted unpickler: DCP's metadata, its find_class an allow-list (grpo_lab/run/sharded.py)
RESTRICTED_UNPICKLER = ("grpo_lab/run/sharded.py", "_MetadataUnpickler")
UNSAFE_CALLS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("dill", "load"), ("dill", "loads"),
                ("cloudpickle", "load"), ("cloudpickle", "loads"), ("joblib", "load"), ("marshal", "load"),
                ("marshal", "loads"), ("shelve", "open"), ("pd", "read_pickle"), ("pandas", "read_pickle"),
                ("yaml", "unsafe_load"), ("serialization", "add_safe_globals")}


def _keyword(call: ast.Call, name: str):
    found = [k.value for k in call.keywords if k.arg == name]
    return found[0].value if found and isinstance(found[0], ast.Constant) else (found[0] if found else None)


def unsafe_loads(path: Path, root: Path = ROOT) -> list[str]:
    """Every load in a Python file that could run code from what it reads, as 'file:line: why'."""
    rel = path.relative_to(root).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "dill", "cloudpickle", "marshal"):
            out += [f"{rel}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                    if a.name.startswith(("load", "Unpickler"))]
        if isinstance(node, ast.ClassDef) and (rel, node.name) != RESTRICTED_UNPICKLER:
            out += [f"{rel}:{node.lineno}: class {node.name} unpickles" for b in node.bases
                    if isinstance(b, ast.Attribute) and b.attr == "Unpickler"]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else \
            func.value.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) else None
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        where = f"{rel}:{node.lineno}"
        if (owner, name) == ("torch", "load") and _keyword(node, "weights_only") is not True:
            out.append(f"{where}: torch.load without weights_only=True")
        if _keyword(node, "weights_only") is False:
            out.append(f"{where}: weights_only=False")
        if (owner, name) in UNSAFE_CALLS:
            out.append(f"{where}: {owner}.{name}")
        if name == "load" and owner == "yaml" and not any(k.arg == "Loader" for k in node.keywords):
            out.append(f"{where}: yaml.load without a safe Loader")
        if (owner, name) in (("np", "load"), ("numpy", "load")) and _keyword(node, "allow_pickle") is not None \
                and _keyword(node, "allow_pickle") is not False:
            out.append(f"{where}: numpy.load with allow_pickle")
        if _keyword(node, "trust_remote_code") is True:
            out.append(f"{where}: trust_remote_code=True")
        if name == "from_pretrained" and owner and owner.startswith("Auto") and \
                not any(k.arg == "trust_remote_code" for k in node.keywords):
            out.append(f"{where}: {owner}.from_pretrained without an explicit trust_remote_code")
    return out


def test_no_load_in_the_tree_can_run_code():
    found = [hit for top in SCANNED for path in sorted((ROOT / top).rglob("*.py")) for hit in unsafe_loads(path)]
    assert not found, "\n".join(found)


def test_the_tree_check_finds_each_kind_of_unsafe_load(tmp_path):
    """The check above cannot pass by missing what it looks for: each line here is found."""
    bad = ["torch.load(f)", "torch.load(f, weights_only=False)", "torch.load(f, map_location='cpu')",
           "x.load_state(weights_only=False)", "pickle.loads(b)", "from pickle import load",
           "class U(pickle.Unpickler): pass", "pd.read_pickle(p)", "yaml.load(t)", "np.load(p, allow_pickle=True)",
           "AutoModelForCausalLM.from_pretrained(d)", "AutoTokenizer.from_pretrained(d, trust_remote_code=True)",
           "torch.serialization.add_safe_globals([X])"]
    path = tmp_path / "loads.py"
    for line in bad:
        path.write_text(line + "\n")
        assert unsafe_loads(path, tmp_path), line
    path.write_text("torch.load(f, weights_only=True)\nyaml.safe_load(t)\nnp.load(p)\n"
                    "AutoTokenizer.from_pretrained(d, trust_remote_code=False)\n")
    assert unsafe_loads(path, tmp_path) == []
