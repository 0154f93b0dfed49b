"""Advice (valid settings that cannot learn) is owned by the member it concerns: a sampler's by the sampler
(grpo_lab/samplers/<name>.py `advice`), printed through grpo_lab.config.checks.advice only when that sampler is
chosen."""

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import advice
from grpo_lab.samplers import SAMPLERS


def test_dars_advises_sample_weights():
    cfg = TrainConfig()
    cfg.sampler.name = "dars"
    lines = [a for a in advice(cfg) if a.startswith("sampler=dars")]
    assert lines == SAMPLERS["dars"].advice(cfg) and "algo.unit_weight=sample" in lines[0]
    cfg.algo.unit_weight = "sample"
    assert SAMPLERS["dars"].advice(cfg) == []


def test_pods_advises_drawing_more_than_it_trains():
    cfg = TrainConfig()
    cfg.sampler.name, cfg.sampler.pods.n = "pods", cfg.sampler.group_size
    assert any(a.startswith(f"sampler.pods.n={cfg.sampler.group_size} equals sampler.group_size") for a in advice(cfg))
    cfg.sampler.name = "fixed"  # the same keys, another sampler: no word of PODS
    assert not any("PODS" in a for a in advice(cfg))


def test_a_sampler_without_advice_gives_none():
    cfg = TrainConfig()
    assert all(cls.advice(cfg) == [] for name, cls in SAMPLERS.items() if name not in ("dars", "pods"))


def test_evaluation_points_without_evaluation_are_said():
    """eval=none with an evaluation schedule: the schedule still chooses the checkpoints saved, and says so."""
    cfg = TrainConfig()
    cfg.eval.n, cfg.eval.every_samples, cfg.eval.every = 0, 512, 5
    said = [line for line in advice(cfg) if line.startswith("eval.n=0")]
    assert said == ["eval.n=0 (eval=none) with eval.every=5, eval.every_samples=512: nothing is evaluated during the "
                    "run; those points only choose the checkpoints saved, for a later python -m experiments.evaluate"]
    cfg.eval.n = 4
    assert not [line for line in advice(cfg) if line.startswith("eval.n=0")]
    cfg.eval.n, cfg.eval.every_samples, cfg.eval.every = 0, 0, 0
    assert not [line for line in advice(cfg) if line.startswith("eval.n=0")]


def test_a_real_model_keeping_every_checkpoint_is_told_the_disk_it_takes():
    cfg = TrainConfig()
    cfg.model.name, cfg.model.path = "hf", "/models/any"
    said = [line for line in advice(cfg) if line.startswith("checkpoint.keep_last=null")]
    assert len(said) == 1 and "checkpoint.keep_last=1 keeps the latest whole" in said[0]
    cfg.checkpoint.keep_last = 1
    assert not [line for line in advice(cfg) if line.startswith("checkpoint.keep_last")]
    assert not [line for line in advice(TrainConfig()) if line.startswith("checkpoint.keep_last")]  # tiny: KBs
