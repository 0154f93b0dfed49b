"""How tied units enter the loss (grpo_lab/advantage/ties.py): algo.tied_kl, algo.tied_norm, algo.tied_batch=zero
and the KL-gradient probe, each against a plain loop written here; every key bit for bit the default where no unit is
tied; resume exact under each; the steps table's tied_norm_share recounted from the groups table."""

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from reference import assert_same_rows

from grpo_lab.advantage.ties import tied_units
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.rewards.rules import RewardWeights
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.objective import AGG_MODES, Normalisers, grpo_loss, loss_normalisers
from grpo_lab.train.trainer import Trainer, train
from grpo_lab.train.update import _kl_gradients

BETA = 0.04


def batch(seed: int = 0, n: int = 6, t: int = 5):
    """Log-probs of 6 rows (3 units of 2) with ragged masks; unit 1 is tied (advantages 0)."""
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g, dtype=torch.float64) * 3).requires_grad_()  # float64: a tight recount
    old = logp.detach() + 0.1 * torch.randn(n, t, generator=g, dtype=torch.float64)
    ref = logp.detach() + 0.3 * torch.randn(n, t, generator=g, dtype=torch.float64)
    mask = torch.ones(n, t, dtype=torch.bool)
    mask[1, 3:], mask[2, 2:], mask[5, 4:] = False, False, False
    adv = torch.tensor([0.7, -0.7, 0.0, 0.0, -1.0, 1.0], dtype=torch.float64)
    weight = torch.tensor([1.0, 1.0, 0.5, 0.5, 2.0, 2.0], dtype=torch.float64)
    tied = torch.from_numpy(tied_units([2, 2, 2], adv.numpy()))
    return logp, old, ref, mask, adv, weight, tied


def plain_loss(logp, old, ref, mask, adv, weight, tied, agg, max_len, masked_kl, dropped, eps=0.2):
    """The loss by loops over rows and tokens: each row's clipped surrogate + beta x k3 (0 on a tied row's tokens
    when masked), its sum (or mean over its tokens), weighted, over the rows the denominator counts."""
    total, denominator = 0.0, 0.0
    for i in range(len(logp)):
        row, length = 0.0, 0
        for j in range(len(logp[i])):
            if not mask[i][j]:
                continue
            ratio = math.exp(logp[i][j] - old[i][j])
            pg = max(-adv[i] * ratio, -adv[i] * min(max(ratio, 1 - eps), 1 + eps))
            d = ref[i][j] - logp[i][j]
            kl = 0.0 if masked_kl and tied[i] else math.exp(d) - d - 1
            row, length = row + pg + BETA * kl, length + 1
        total += weight[i] * (row / length if agg == "sequence" else row)
        if not (dropped and tied[i]):
            denominator += weight[i] * (1 if agg == "sequence" else length if agg == "token" else max_len)
    return total / denominator


def test_tied_units_are_the_units_whose_every_advantage_and_direction_is_zero():
    adv = np.array([0, 0, 0.5, -0.5, 0, 0, 0, 0.0])
    assert tied_units([2, 3, 3], adv).tolist() == [True, True, False, False, False, True, True, True]
    direction = np.array([0, 0, 0, 0, 0, 0, 1, 0], np.int8)  # RL-ZVP shapes the last unit: it is not tied
    assert tied_units([2, 3, 3], adv, direction).tolist() == [True, True, False, False, False, False, False, False]
    assert tied_units([], np.zeros(0)).tolist() == []


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("masked_kl, dropped", [(False, False), (True, False), (False, True), (True, True)])
def test_the_loss_with_ties_masked_or_dropped_recounts_by_loops(agg, masked_kl, dropped):
    logp, old, ref, mask, adv, weight, tied = batch()
    norm = loss_normalisers(mask.sum(-1), weight, agg, 7, counted=~tied if dropped else None)
    loss, _ = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=BETA, agg=agg, max_len=7, seq_weight=weight,
                        norm=norm, kl_rows=~tied if masked_kl else None)
    want = plain_loss(logp.tolist(), old.tolist(), ref.tolist(), mask.tolist(), adv.tolist(), weight.tolist(),
                      tied.tolist(), agg, 7, masked_kl, dropped)
    assert float(loss.detach()) == pytest.approx(want, rel=1e-10)
    assert float(norm.tokens) == float(mask.sum())  # the statistics' token count keeps every row either way


@pytest.mark.parametrize("agg", AGG_MODES)
def test_a_masked_kls_gradient_is_exactly_zero_on_tied_rows_and_unchanged_elsewhere(agg):
    logp, old, ref, mask, adv, weight, tied = batch(1)
    norm = loss_normalisers(mask.sum(-1), weight, agg, 7)
    grads = {}
    for name, rows in (("keep", None), ("mask", ~tied)):
        x = logp.detach().clone().requires_grad_()
        loss, st = grpo_loss(x, old, adv, mask, ref_logp=ref, beta=BETA, agg=agg, max_len=7, seq_weight=weight,
                             norm=norm, kl_rows=rows)
        loss.backward()
        grads[name] = (x.grad, st.kl)
    (keep, kl_keep), (masked, kl_masked) = grads["keep"], grads["mask"]
    assert (masked[tied] == 0).all() and (keep[tied][mask[tied]] != 0).all()  # the KL pulled the tied rows before
    assert torch.equal(masked[~tied], keep[~tied])
    assert kl_masked == kl_keep  # the statistic measures the distance on every row either way


def test_the_kl_probe_recounts_each_parts_gradient_by_a_loop_over_its_rows():
    """_kl_gradients against backward passes of the KL term summed row by row, tied rows and untied apart."""
    from grpo_lab.config import TrainConfig

    cfg = TrainConfig()
    cfg.algo.loss_agg, cfg.rollout.max_new_tokens = "token", 5
    _, _, ref, mask, adv, weight, tied = batch(2)
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 5, generator=g).requires_grad_()
    logp = torch.nn.functional.logsigmoid(w)  # a "model": log-probs from its one parameter
    norm = loss_normalisers(mask.sum(-1), weight, "token", 5)
    for carry in (True, False):
        into = [[torch.zeros_like(w)], [torch.zeros_like(w)]]
        _kl_gradients(into, [w], logp, ref, mask, tied, carry, norm, weight, cfg)
        for part, rows in zip(into, (tied if carry else torch.zeros_like(tied), ~tied)):
            w.grad = None
            term = sum(weight[i] * BETA * sum(torch.exp(ref[i, j] - logp[i, j]) - (ref[i, j] - logp[i, j]) - 1
                                              for j in range(5) if mask[i, j])
                       for i in range(6) if rows[i])
            if rows.any():
                (term / float(norm.loss)).backward(retain_graph=True)
                torch.testing.assert_close(part[0], w.grad, rtol=1e-5, atol=1e-8)
            else:
                assert (part[0] == 0).all()


def trainer_for(cfg) -> Trainer:
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    return Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))


def weights(trainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


KEYS = {"tied_kl": "mask", "tied_norm": "drop", "tied_batch": "zero"}


def with_keys(cfg, out: str, **keys):
    cfg = copy.deepcopy(cfg)
    cfg.out_dir = out
    for key, value in keys.items():
        setattr(cfg.algo, key, value)
    return cfg


def test_where_no_unit_is_tied_every_key_is_the_default_bit_for_bit(tiny_cfg, tmp_path):
    """Under rl_zvp every tied group's tokens are shaped, so no unit is tied (ties by reward included): each key,
    and all at once, train the default's weights and write its tables, bit for bit."""
    tiny_cfg.algo.advantage, tiny_cfg.algo.mu, tiny_cfg.max_steps = "rl_zvp", 2, 3
    default = train(with_keys(tiny_cfg, str(tmp_path / "default")))
    groups = read_table(default, "groups").to_pandas()
    assert groups["tie"].any() and (groups["n_informative"][groups["tie"]] > 0).all()
    steps = read_table(default, "steps").to_pandas()
    assert (steps["tied_norm_share"] == 0).all()
    for name, keys in [*((k, {k: v}) for k, v in KEYS.items()), ("all", KEYS)]:
        assert_same_rows(default, train(with_keys(tiny_cfg, str(tmp_path / name), **keys)), ("groups", "steps", "eval"))
    last = {}
    for name in ("default", "all"):
        t = trainer_for(with_keys(tiny_cfg, str(tmp_path / f"{name}-again"), **(KEYS if name == "all" else {})))
        for _ in range(3):
            t.step()
        last[name] = weights(t)
    assert all(torch.equal(last["all"][k], v) for k, v in last["default"].items())


def tie_run(tmp_path, name: str, steps: int = 8, **keys):
    """Groups of 2 on two level-2 or level-3 prompts a step: some batches all tied, some mixed, some untied."""
    from grpo_lab.config import TrainConfig

    cfg = TrainConfig(out_dir=str(tmp_path / name), max_steps=steps, prompts_per_step=2, checkpoint_every=4)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [2, 3], 8, 0
    cfg.sampler.group_size, cfg.algo.mu = 2, 2
    for key, value in keys.items():
        setattr(cfg.algo, key, value)
    return cfg


@pytest.mark.parametrize("keys", [dict(tied_kl="mask"), dict(tied_norm="drop"), dict(tied_batch="zero"),
                                  dict(kl_grad_every=3), dict(tied_kl="mask", tied_norm="drop", loss_agg="token")],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_each_key_resumes_exactly_and_changes_the_run_only_where_units_tie(tmp_path, keys):
    full = train(tie_run(tmp_path, "full", **keys))
    half = tie_run(tmp_path, "half", steps=4, **keys)
    train(half)
    assert_same_rows(full, train(tie_run(tmp_path, "half", **keys)), ("groups", "steps"))
    steps = read_table(full, "steps").to_pandas()
    groups = read_table(full, "groups").to_pandas()
    assert (steps["informative"] == 0).any() and (steps["informative"] > 0).any()  # all-tied batches and others
    assert ((steps["tied_norm_share"] > 0) & (steps["tied_norm_share"] < 1)).any()  # batches with both
    default = tie_run(tmp_path, "default", **{k: v for k, v in keys.items() if k == "loss_agg"})
    base = read_table(train(default), "steps").to_pandas()
    first = int(steps["step"][steps["tied_norm_share"] > 0].min())  # the first step a unit tied
    same = steps["step"] < first
    for c in ("loss", "grad_norm", "kl", "opt_steps"):  # nothing differs before a unit ties
        np.testing.assert_array_equal(steps[c][same], base[c][same], err_msg=c)
    if "kl_grad_every" in keys:  # the probe measures, and moves nothing
        assert_same_rows(Path(default.out_dir), full, ("groups",))
        probed = steps["step"] % 3 == 0
        assert steps[["kl_grad_tied", "kl_grad_untied"]][~probed].isna().all().all()
        measured = steps[probed & (steps["opt_steps"] > 0)]
        assert len(measured) and (measured["kl_grad_untied"].notna()).all()
    else:  # the key changed the run once a unit tied
        assert not np.array_equal(steps["loss"].to_numpy(), base["loss"].to_numpy())
    if keys.get("tied_batch") == "zero":
        all_tied = steps["informative"] == 0
        assert (steps["opt_steps"][all_tied] == 2).all() and (steps["grad_norm"][all_tied] == 0).all()
        assert not groups[groups["step"].isin(steps["step"][all_tied])]["used"].any()  # nothing learned from them


@pytest.mark.parametrize("agg", ["sequence", "token"])
def test_the_tied_share_of_the_denominator_recounts_from_the_groups_table(tmp_path, agg):
    """Fixed groups, each its own unit of weight 1: the share is the tied groups' count (sequence) or generated
    tokens (token) over all the step's, where a tied group is one whose every recorded advantage is 0."""
    steps = read_table(train(tie_run(tmp_path, agg, loss_agg=agg)), "steps").to_pandas()
    groups = read_table(Path(tmp_path / agg), "groups").to_pandas()
    groups["tied"] = [bool((np.asarray(a) == 0).all()) for a in groups["advantages"]]
    groups["size"] = 1 if agg == "sequence" else groups["tokens"]
    for step, g in groups.groupby("step"):
        got = float(steps.set_index("step").loc[step, "tied_norm_share"])
        if g["used"].any():
            assert got == pytest.approx(g["size"][g["tied"]].sum() / g["size"].sum(), abs=1e-12), step
    share = steps["tied_norm_share"]
    assert (share == 1).any() and ((share > 0) & (share < 1)).any()


def all_tied_step(tiny_cfg, out: str, **keys) -> tuple[dict, dict, dict, dict]:
    """One informative step under the defaults, then one under `keys` whose every reward is 0: its row, the weights
    and AdamW's step counts before it, and the weights and AdamW's state after it."""
    cfg = with_keys(tiny_cfg, out)
    cfg.algo.mu, cfg.eval.n = 2, 0
    trainer = trainer_for(cfg)
    assert trainer.step()["informative"] > 0
    for key, value in keys.items():  # the same first step for every case
        setattr(trainer.cfg.algo, key, value)
    before = weights(trainer), {k: v["step"].clone() for k, v in trainer.optimizer.state_dict()["state"].items()}
    trainer.weights = RewardWeights(0.0, 0.0)
    row = trainer.step()
    assert row["informative"] == 0 and row["tied_norm_share"] == 1.0
    return row, before, weights(trainer), trainer.optimizer.state_dict()["state"]


def test_zero_takes_the_steps_a_masked_kl_takes_on_an_all_tied_batch(tiny_cfg, tmp_path):
    """algo.tied_batch=zero runs no backward and steps AdamW on zeros: the weights a full step on a masked KL
    reaches (its gradient exactly 0), with one policy pass instead of two with backward; Adam's count advances."""
    zero, (w0, count0), w_zero, state = all_tied_step(tiny_cfg, str(tmp_path / "zero"), tied_batch="zero")
    masked, _, w_masked, _ = all_tied_step(tiny_cfg, str(tmp_path / "masked"), tied_kl="mask")
    assert zero["opt_steps"] == masked["opt_steps"] == 2 and zero["grad_norm"] == masked["grad_norm"] == 0.0
    assert zero["token_passes"] < masked["token_passes"]
    assert any(not torch.equal(w_zero[k], w0[k]) for k in w0)  # the moments moved the weights
    assert all(int(state[k]["step"]) == int(count0[k]) + 2 for k in count0)
    for k in w_zero:
        torch.testing.assert_close(w_zero[k], w_masked[k], rtol=0, atol=1e-7, msg=k)


def test_dropping_ties_from_an_all_tied_batchs_denominator_keeps_the_one_that_counts_them(tiny_cfg, tmp_path):
    """No untied unit: nothing left to divide by, so the denominator that counts the tied ones stays (the KL's
    steps are the default's, finite)."""
    dropped, _, w_dropped, _ = all_tied_step(tiny_cfg, str(tmp_path / "drop"), tied_norm="drop")
    counted, _, w_counted, _ = all_tied_step(tiny_cfg, str(tmp_path / "count"))
    assert math.isfinite(dropped["loss"]) and dropped["loss"] == counted["loss"]
    assert all(torch.equal(w_dropped[k], w_counted[k]) for k in w_counted)


@pytest.mark.parametrize("key, value, message", [
    ("tied_kl", "drop", r"^algo\.tied_kl='drop' is invalid: must be one of 'keep', 'mask'$"),
    ("tied_norm", "mask", r"^algo\.tied_norm='mask' is invalid: must be one of 'count', 'drop'$"),
    ("tied_batch", "maybe", r"^algo\.tied_batch='maybe' is invalid: must be one of 'step', 'skip', 'zero'$"),
    ("kl_grad_every", -1, r"^algo\.kl_grad_every=-1 is invalid: must be >= 0"),
])
def test_a_bad_value_is_refused_in_one_line_naming_the_key(tiny_cfg, key, value, message):
    setattr(tiny_cfg.algo, key, value)
    with pytest.raises(ConfigError, match=message):
        validate(tiny_cfg)


def test_the_probe_is_refused_where_there_is_no_kl_or_no_whole_parameter(tiny_cfg):
    tiny_cfg.algo.kl_grad_every, tiny_cfg.algo.beta = 5, 0.0
    with pytest.raises(ConfigError, match=r"^algo\.kl_grad_every=5 is invalid: .*algo\.beta=0"):
        validate(tiny_cfg)
    tiny_cfg.algo.beta, tiny_cfg.dist.strategy = 0.04, "fsdp"
    with pytest.raises(ConfigError, match=r"^algo\.kl_grad_every=5 is invalid: .*fsdp"):
        validate(tiny_cfg)


def test_normalisers_of_a_micro_batch_sum_to_the_whole_batchs_with_ties_dropped():
    """The denominators are sums over rows, so a batch's parts add theirs up with tied rows left out too."""
    _, _, _, mask, _, weight, tied = batch()
    for agg in AGG_MODES:
        whole = loss_normalisers(mask.sum(-1), weight, agg, 7, counted=~tied)
        parts = [loss_normalisers(mask[s].sum(-1), weight[s], agg, 7, counted=~tied[s])
                 for s in (slice(0, 3), slice(3, 6))]
        assert isinstance(whole, Normalisers)
        assert float(whole.loss) == pytest.approx(sum(float(p.loss) for p in parts), rel=1e-12)
