"""Rollout engines are a registry, as samplers are (grpo_lab/rollout/engines.py): an engine registered from outside is
chosen by `rollout.engine=<its name>`, its own keys are checked before a run starts, and the trainer and the
evaluation draw every sample through it and sync it after every update. The helpers an engine outside the policy
module uses (grpo_lab/rollout/external.py) make the hf loop's own Rollout from the same tokens."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch

from fixtures.models import adapted_copy
from grpo_lab.config.blocks import with_members
from grpo_lab.config.schema import RolloutKeys
from grpo_lab.errors import ConfigError, require
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings
from grpo_lab.rollout.engines import ENGINES
from grpo_lab.rollout.external import full_weights, rollout_from_rows
from grpo_lab.rollout.hf_engine import HFEngine
from grpo_lab.train.trainer import train

PROMPTS = ["7+5=", "31+4=", "58+67=", "2+2="]  # different lengths: left padding is exercised


@dataclass
class CountingSettings(EngineSettings):
    """rollout.counting.*: the throwaway engine's one key."""

    most_draws: int = 1000  # draws it takes before it refuses another

    def check(self, key: str) -> None:
        require(self.most_draws >= 1, f"{key}.most_draws", self.most_draws, "must be >= 1")


class CountingEngine(RolloutEngine):
    """The hf engine, wrapped: every draw, sampled row, sync and close counted."""

    name = "counting"
    settings_type = CountingSettings
    built: list[CountingEngine] = []  # every engine made while registered, in order

    def __init__(self, model, tokenizer, cfg, device):
        self.inner = HFEngine(model, tokenizer, cfg, device)
        self.most = cfg.rollout.counting.most_draws
        self.draws, self.rows, self.syncs, self.closed = 0, 0, 0, False
        CountingEngine.built.append(self)

    def draw(self, prompts, group_size, sampling, generator):
        assert self.draws < self.most, "more draws than rollout.counting.most_draws"
        self.draws += 1
        self.rows += len(prompts) * group_size
        return self.inner.draw(prompts, group_size, sampling, generator)

    def sync(self, model) -> None:
        self.syncs += 1
        self.inner.sync(model)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def counting(monkeypatch):
    """The counting engine registered from outside the package, for this test only, and a config block type that
    has its keys (made from the registry, as the package's own RolloutConfig is)."""
    monkeypatch.setitem(ENGINES, CountingEngine.name, CountingEngine)
    monkeypatch.setattr(CountingEngine, "built", [])
    return with_members("RolloutConfig", RolloutKeys, ENGINES, __name__)


def choose(cfg, block_type, engine: str, **keys):
    """`cfg` with its rollout block made by `block_type`, the same shared values, `rollout.engine=engine`."""
    shared = {f.name: getattr(cfg.rollout, f.name) for f in dataclasses.fields(cfg.rollout)}
    cfg.rollout = block_type(**{**shared, "engine": engine})
    for key, value in keys.items():
        setattr(cfg.rollout.counting, key, value)
    return cfg


def table(run: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run / name).drop(columns="run_id")


def test_an_engine_registered_from_outside_draws_every_sample_of_a_real_run(tiny_cfg, counting, tmp_path):
    """rollout.engine=counting: every training and evaluation sample is drawn through it (it wraps the hf engine, so
    the run's tables are the hf run's), it is synced after every step that took an optimizer step, and closed."""
    plain = choose(copy.deepcopy(tiny_cfg), counting, "hf")  # its block there too: every engine's keys are checked
    plain.out_dir = str(tmp_path / "hf")
    cfg = choose(tiny_cfg, counting, "counting", most_draws=500)
    run = train(cfg)
    (engine,) = CountingEngine.built
    steps, evals = table(run, "steps"), table(run, "eval")
    assert engine.closed and engine.draws > 0
    assert engine.rows == int(steps["samples_total"].max()) + len(evals)  # every sample drawn, none elsewhere
    assert engine.syncs == int((steps["opt_steps"] > 0).sum()) > 0
    saved = json.loads((run / "config.json").read_text())
    assert saved["rollout.engine"] == "counting" and saved["rollout.counting.most_draws"] == 500
    train(plain)
    assert len(CountingEngine.built) == 1  # the hf run built none
    for name in ("groups", "eval"):
        pd.testing.assert_frame_equal(table(run, name), table(Path(plain.out_dir), name))


def test_its_own_key_and_its_name_are_checked_before_the_run_starts(tiny_cfg, counting):
    cfg = choose(tiny_cfg, counting, "counting", most_draws=0)
    with pytest.raises(ConfigError) as e:
        train(cfg)
    assert str(e.value) == "rollout.counting.most_draws=0 is invalid: must be >= 1"
    assert not Path(cfg.out_dir).exists() and not CountingEngine.built  # nothing made, nothing loaded
    cfg = choose(tiny_cfg, counting, "countin")
    with pytest.raises(ConfigError, match=r"^rollout.engine='countin' is invalid: must be one of 'hf', 'vllm', "
                                          r"'counting'$"):
        train(cfg)


@pytest.fixture(scope="module")
def policy():
    model, tok = load_policy("tiny", None, device="cpu", dtype="float32")
    return model, tok, eos_ids(model, tok)


def test_sample_takes_its_settings_as_one_object_or_as_keywords(policy):
    model, tok, ends = policy
    engine = HFEngine(model, tok)
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0, end_ids=ends, stop=("1",))
    a = engine.sample(PROMPTS, 4, settings, generator=torch.Generator().manual_seed(3))
    b = engine.sample(PROMPTS, 4, generator=torch.Generator().manual_seed(3), max_new_tokens=6, temperature=1.0,
                      end_ids=ends, stop=["1"])
    assert a.texts == b.texts and torch.equal(a.completion_ids, b.completion_ids)
    with pytest.raises(TypeError, match="not both"):
        engine.sample(PROMPTS, 4, settings, generator=torch.Generator(), temperature=0.5)


@pytest.mark.parametrize("stop", [(), ("1",), ("+", "3")])
def test_an_external_engines_rows_make_the_hf_loops_rollout(policy, stop):
    """An engine that drew the hf loop's tokens gets the hf loop's Rollout from `rollout_from_rows`, though it ran
    past each stop string (an engine that stops at end tokens only does): stop strings, ends, counts, texts."""
    model, tok, ends = policy
    sampling = SamplingSettings(max_new_tokens=6, temperature=1.0, end_ids=ends, stop=stop)
    ro = HFEngine(model, tok).sample(PROMPTS, 8, sampling, generator=torch.Generator().manual_seed(1))
    filler = tok("9", add_special_tokens=False)["input_ids"]
    rows = []
    for ids, logp, n, truncated in zip(ro.completion_ids, ro.old_logp, ro.lengths.tolist(), ro.truncated.tolist()):
        ended_by_stop = not truncated and int(ids[n - 1]) not in ends
        extra = filler * 2 if ended_by_stop else []  # tokens drawn past the stop string
        rows.append((ids[:n].tolist() + extra, logp[:n].tolist() + [-1.0] * len(extra)))
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    again = rollout_from_rows(tok, enc["input_ids"], enc["attention_mask"], rows, 8, sampling, torch.device("cpu"))
    if stop:
        assert any(len(t) > n for (t, _), n in zip(rows, ro.lengths.tolist()))  # some row ran past its stop
    assert again.texts == ro.texts
    assert torch.equal(again.lengths, ro.lengths) and torch.equal(again.truncated, ro.truncated)
    width = ro.completion_ids.shape[1]
    assert not again.completion_mask[:, width:].any()
    assert torch.equal(again.completion_mask[:, :width], ro.completion_mask)
    assert torch.equal(again.completion_ids[:, :width] * ro.completion_mask, ro.completion_ids * ro.completion_mask)
    assert torch.equal(again.old_logp[:, :width], ro.old_logp)


def test_full_weights_push_a_lora_policy_as_its_merged_weights(policy):
    """LoRA layers as base weight plus adapter delta under the base model's names (what a merge would give, with
    no merged copy kept), every other weight as it is, a tied weight once."""

    base = policy[0]
    plain = dict(full_weights(base))
    assert plain.keys() <= base.state_dict().keys() and len(plain) == len({id(p) for p in base.parameters()})
    model, peft = adapted_copy(base)
    pushed = dict(full_weights(model))
    merged = dict(full_weights(copy.deepcopy(peft).merge_and_unload()))
    assert pushed.keys() == merged.keys() == plain.keys()
    for name, weight in pushed.items():
        torch.testing.assert_close(weight, merged[name])
    assert any(not torch.equal(pushed[n], plain[n]) for n in pushed)  # the deltas were pushed
