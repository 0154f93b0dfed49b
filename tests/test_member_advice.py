"""Advice (valid settings that cannot learn) is owned by the member it concerns: a sampler's by the sampler
(grpo_lab/samplers/<name>.py `advice`), printed through grpo_lab.checks.advice only when that sampler is chosen."""

from grpo_lab.checks import advice
from grpo_lab.config import TrainConfig
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
