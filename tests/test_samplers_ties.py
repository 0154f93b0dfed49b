"""Samplers that use or avoid tied groups (pods, replay, dars) and the advantage rules on real tiny runs: their rules
against brute force and their official code's arithmetic, the replay buffer's draws against its scores, every
sample's recorded advantage recounted from the rewards alone, budgets recounted from the tables, the buffer
replayed from the groups table, behaviour log-probs against the checkpoint that sampled them, exact resume."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch
from reference import assert_same_rows, plain_grpo, plain_ngrpo
from scipy import stats

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.model.load import load_policy
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.run.checkpoints import load_weights, read_state
from grpo_lab.run.tables import read_table
from grpo_lab.samplers.dars import extra_answers
from grpo_lab.samplers.pods import max_variance_subset
from grpo_lab.samplers.replay import draw_replays, offer, replay_score
from grpo_lab.train.trainer import train


def test_pods_keeps_a_maximum_variance_subset():
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(2, 10))
        m = int(rng.integers(2, n + 1))
        rewards = (rng.random(n) < rng.random()).astype(np.float32) if trial % 2 else rng.random(n).astype(np.float32)
        mask = max_variance_subset(rewards, m)
        best = max(np.var(rewards[list(c)].astype(np.float64), ddof=1) for c in itertools.combinations(range(n), m))
        assert mask.sum() == m and np.var(rewards[mask].astype(np.float64), ddof=1) == pytest.approx(best, abs=1e-12)
    # binary rewards: k right with k as close to m/2 as the group allows
    for right, n, m in [(3, 16, 8), (12, 16, 8), (8, 16, 8), (0, 16, 8), (1, 32, 8), (5, 9, 4)]:
        mask = max_variance_subset(np.array([1.0] * right + [0.0] * (n - right), np.float32), m)
        assert mask[:right].sum() == min(max(m // 2, m - (n - right)), right)


def codes_subset(rewards, m):
    """PODS's code (maxvargrpo_trainer.py) as written there, with a stable sort."""
    sorted_indices = list(np.argsort(-np.asarray(rewards), kind="stable"))
    indices = sorted_indices[:m]
    variance = np.var(np.asarray(rewards, np.float64)[indices], ddof=1)
    for i in range(m):
        _indices = sorted_indices[:i] + sorted_indices[i - m:]
        _variance = np.var(np.asarray(rewards, np.float64)[_indices], ddof=1)
        if _variance > variance:
            variance, indices = _variance, _indices
    return sorted(indices)


def test_pods_subset_is_the_official_codes_choice():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 33))
        m = int(rng.integers(2, n + 1))
        rewards = np.round(rng.random(n) * 2) / 2  # many ties: which of equal rewards is taken matters
        assert np.flatnonzero(max_variance_subset(rewards, m)).tolist() == codes_subset(rewards, m)


def test_dars_extra_answers_as_its_code():
    # N = 8, N_max = 32 (its runs): ET gives ceil(8 / (4 acc (1 - acc)) - 8), acc = 0 counting as 1/16
    assert [extra_answers(c / 8, 8, 32) for c in range(9)] == [24, 11, 3, 1, 0, 0, 0, 0, 0]
    assert [extra_answers(c / 8, 8, 32, "hw") for c in range(5)] == [24, 24, 8, 3, 0]  # ceil(8 / (2 acc) - 8)
    assert extra_answers(0.0, 8, 20) == 12  # capped at N_max in all
    for acc in np.linspace(0.01, 0.49, 97):
        assert extra_answers(acc, 8, 10**6) == math.ceil(8 / (4 * acc * (1 - acc)) - 8)
        assert extra_answers(acc, 8, 10**6, "hw") == math.ceil(8 / (2 * acc) - 8)


def test_the_buffers_draws_follow_its_scores():
    """First draws in proportion to the scores, ordered pairs as successive sampling without replacement."""
    scores = [1.0, 2.0, 3.0, 4.0]
    rng = np.random.default_rng(123)
    draws = [tuple(draw_replays(scores, 2, rng)) for _ in range(40_000)]
    first = np.bincount([d[0] for d in draws], minlength=4)
    assert stats.chisquare(first, np.array(scores) / 10 * len(draws)).pvalue > 1e-3
    cells = list(itertools.permutations(range(4), 2))
    want = np.array([scores[i] / 10 * scores[j] / (10 - scores[i]) for i, j in cells]) * len(draws)
    got = np.array([sum(d == c for d in draws) for c in cells])
    assert stats.chisquare(got, want).pvalue > 1e-3
    assert all(d[0] != d[1] for d in draws)  # never the same group twice in one batch
    assert len(draw_replays(scores, 9, rng)) == 4 and draw_replays([], 3, rng) == []


def test_the_buffer_keeps_the_highest_scores():
    rng = np.random.default_rng(2)
    scores = rng.permutation(50).astype(float)
    buffer = []
    for seq, s in enumerate(scores):
        offer(buffer, dict(seq=seq, score=s), 5)
    assert sorted(e["score"] for e in buffer) == [45, 46, 47, 48, 49]
    assert [e["seq"] for e in buffer] == sorted(e["seq"] for e in buffer)  # in the order they came in
    ties = []
    for seq, s in enumerate([1.0, 1.0, 1.0, 2.0]):  # equal scores: no comparison beyond (score, seq)
        offer(ties, dict(seq=seq, score=s), 2)
    assert [e["seq"] for e in ties] == [1, 3]  # the third 1.0 did not beat the lowest; the 2.0 evicted the oldest


def tie_cfg(tmp_path, sampler: str, rule: str = "grpo", steps: int = 4, levels=(1, 2, 4), **own) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(tmp_path / f"{sampler}-{rule}"), max_steps=steps, prompts_per_step=4,
                      checkpoint_every=1)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = list(levels), 4, 0
    s = cfg.sampler
    s.name, s.group_size = sampler, 4
    s.pods.n, s.dars.max_per_prompt = 8, 12
    for k, v in own.items():
        setattr(getattr(s, sampler), k, v)
    cfg.algo.advantage = rule
    return cfg


def recount(run) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The counters against the groups table: draws advance samples_total, replays do not."""
    g, s = read_table(run, "groups").to_pandas(), read_table(run, "steps").to_pandas()
    drawn = g["group_size"].where(~g["reused"], 0)
    assert g["samples_total"].tolist() == drawn.cumsum().tolist()
    assert g["tokens_total"].tolist() == g["tokens"].where(~g["reused"], 0).cumsum().tolist()
    per = g.assign(drawn=drawn, replayed=g["n_trained"].where(g["reused"], 0),
                   tied_inf=g["n_informative"].where(g["tie"], 0)).groupby("step").agg(
        samples=("drawn", "sum"), trained=("n_trained", "sum"), reused=("replayed", "sum"),
        informative=("n_informative", "sum"), informative_tied=("tied_inf", "sum"))
    for col in per.columns:
        assert s[col].tolist() == per[col].tolist(), col
    assert s["groups"].tolist() == (~g["reused"]).groupby(g["step"]).sum().tolist()
    trained = g["advantages"].map(lambda a: int(np.sum(~np.isnan(a))))
    assert (trained == g["n_trained"]).all()  # NaN exactly where a sample did not enter the update
    assert (g["n_informative"] == g["advantages"].map(lambda a: int(np.sum(np.nan_to_num(a) != 0)))).all()
    return g, s


def recount_advantages(g: pd.DataFrame, rule: str, m: int | None = None, alpha: float = 0.1) -> int:
    """Every trained sample's advantage from its unit's rewards alone (RL-ZVP's tied units: from the entropies
    stored beside them); a replay's from its source row. Returns the units checked."""
    units = 0
    for _, rows in g[g["unit"].notna()].groupby(["step", "unit"]):
        got = np.concatenate(rows["advantages"].tolist())
        if rows["reused"].all():  # a replay trains with what it had at its source step
            src = g[(g["step"] == rows["source_step"].iloc[0]) & (g["prompt_id"] == rows["prompt_id"].iloc[0])
                    & ~g["reused"]]
            np.testing.assert_array_equal(got, np.concatenate(src["advantages"].tolist()))
            units += 1
            continue
        rewards = np.concatenate(rows["rewards"].tolist()).astype(np.float64)
        correct = np.concatenate(rows["correct"].tolist())
        keep = np.ones(len(rewards), bool) if m is None else np.concatenate(
            [max_variance_subset(np.asarray(r, np.float32), m) for r in rows["rewards"]])  # pods's subset, recounted
        want = np.full(len(rewards), np.nan)
        tied = rewards[keep].std() <= 1e-8
        if rule == "rl_zvp" and tied and (correct[keep].all() or not correct[keep].any()):
            h_mean = np.concatenate(rows["entropy_mean"].tolist())
            h_max = np.concatenate(rows["entropy_max"].tolist())
            want[keep] = (alpha * h_mean if correct[keep].all() else -alpha * (h_max - h_mean))[keep]
        else:
            want[keep] = (plain_ngrpo if rule == "ngrpo" else plain_grpo)(rewards[keep].tolist())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        units += 1
    return units


@pytest.mark.parametrize("sampler,rule", [("fixed", "grpo"), ("fixed", "ngrpo"), ("fixed", "rl_zvp"),
                                          ("pods", "grpo"), ("pods", "ngrpo"), ("dars", "grpo"),
                                          ("replay", "grpo"), ("replay", "rl_zvp")])
def test_every_rules_advantages_recount_from_the_tables(tmp_path, sampler, rule):
    g, s = recount(train(tie_cfg(tmp_path, sampler, rule)))
    checked = recount_advantages(g, rule, m=4 if sampler == "pods" else None)
    assert checked == g.dropna(subset=["unit"]).groupby(["step", "unit"]).ngroups > 0
    tied = g[g["tie"] & g["used"]]
    if rule != "grpo" and len(tied):  # a tied group can be informative now, and is counted apart
        assert s["informative_tied"].sum() > 0
    if rule == "rl_zvp":  # entropies exactly where samples trained; other rules store none
        assert g["entropy_mean"].map(lambda h: np.isnan(h).tolist()).tolist() == g["advantages"].map(
            lambda a: np.isnan(a).tolist()).tolist()
    else:
        assert g["entropy_mean"].isna().all()


def test_pods_draws_n_and_trains_group_size(tmp_path):
    g, s = recount(train(tie_cfg(tmp_path, "pods")))
    assert (g["group_size"] == 8).all() and (g["n_trained"] == 4).all() and (s["samples"] == 4 * 8).all()
    assert (s["trained"] == 16).all()


def test_dars_adds_answers_to_hard_prompts_and_drops_what_stays_tied(tmp_path):
    g, s = recount(train(tie_cfg(tmp_path, "dars", steps=5)))
    first, extra = g[g["round"] == 0], g[g["round"] == 1]
    assert len(extra) > 0 and (first["group_size"] == 4).all()
    for _, rows in g.groupby(["step", "prompt_id"]):
        acc = rows["n_correct"].iloc[0] / 4
        want = extra_answers(acc, 4, 12)
        assert rows["group_size"].iloc[1:].tolist() == ([want] if want else [])
        right = rows["n_correct"].sum() / rows["group_size"].sum()
        assert rows["used"].all() == (0 < right < 1) and rows["used"].nunique() == 1  # a unit trains whole, or not
    assert s["samples"].max() > 16 and (s["samples"] <= 4 * 12).all()


def buffer_from_table(g: pd.DataFrame, size: int) -> list[dict]:
    """Replay the buffer from the groups table: at each step, its replays come from what earlier steps buffered,
    one for each tie while the buffer lasts, never twice; then every mixed group that trained is offered."""
    buffer, seq = [], 0
    for step, rows in g.groupby("step", sort=True):
        replays = rows[rows["reused"]]
        held = {(e["step"], e["prompt_id"]) for e in buffer}
        picked = list(zip(replays["source_step"], replays["prompt_id"]))
        assert set(picked) <= held and len(set(picked)) == len(picked)
        assert len(replays) == min(int(rows.loc[~rows["reused"], "tie"].sum()), len(buffer))
        ties = rows[~rows["reused"] & rows["tie"]]  # the first ties are replaced, the rest train as drawn
        assert ties["used"].tolist() == [False] * len(replays) + [True] * (len(ties) - len(replays))
        for _, r in rows[~rows["reused"] & rows["used"] & ~rows["tie"]].iterrows():
            score = replay_score(np.asarray(r["rewards"], np.float32), np.asarray(r["advantages"], np.float32))
            offer(buffer, dict(seq=seq, step=step, prompt_id=r["prompt_id"], score=score), size)
            seq += 1
    return buffer


@pytest.mark.parametrize("size", [64, 3])
def test_the_replay_buffer_holds_every_mixed_group_offered(tmp_path, size):
    """TRL's version buffered one group a batch; this one every mixed group (up to its size), as the table says."""
    cfg = tie_cfg(tmp_path, "replay", steps=6, size=size)
    run = train(cfg)
    g, s = recount(run)
    state = read_state(run / "checkpoints" / "step-000006")["counters"]["sampler"]
    held = [(e["step"], e["problem"].prompt_id, e["score"]) for e in state["buffer"]]
    assert held == [(e["step"], e["prompt_id"], e["score"]) for e in buffer_from_table(g, size)]
    step1 = read_state(run / "checkpoints" / "step-000001")["counters"]["sampler"]
    mixed = g[(g["step"] == 1) & ~g["tie"]]
    assert len(step1["buffer"]) == min(len(mixed), size) >= 2  # more than one group of the batch
    assert s["reused"].sum() > 0 and (g.loc[g["reused"], "n_trained"] == 4).all()


def test_a_buffered_group_keeps_the_log_probs_of_the_policy_that_sampled_it(tmp_path):
    run = train(tie_cfg(tmp_path, "replay", steps=5))
    state = read_state(run / "checkpoints" / "step-000005")["counters"]["sampler"]
    later = [e for e in state["buffer"] if e["step"] > 1]
    assert later
    model, _ = load_policy("tiny", None, "cpu", "float32")
    for e in later:  # the policy that drew it: the weights of the checkpoint before its step
        load_weights(run / "checkpoints" / f"step-{e['step'] - 1:06d}", model)
        with torch.no_grad():
            want = completion_logprobs(model, e["samples"], 1.0, chunk=512)
        torch.testing.assert_close(e["samples"].old_logp, want, atol=1e-5, rtol=0)
    load_weights(run / "checkpoints" / "step-000005", model)
    with torch.no_grad():
        later_model_lp = completion_logprobs(model, later[0]["samples"], 1.0, chunk=512)
    assert not torch.allclose(later_model_lp, later[0]["samples"].old_logp, atol=1e-5)  # the policy has moved


@pytest.mark.parametrize("sampler,rule", [("pods", "grpo"), ("replay", "rl_zvp"), ("dars", "ngrpo")])
def test_resume_mid_run_restores_the_new_samplers_exactly(tmp_path, sampler, rule):
    steps = 5
    full = train(tie_cfg(tmp_path / "full", sampler, rule, steps=steps))
    cfg = tie_cfg(tmp_path / "killed", sampler, rule, steps=steps - 2)
    killed = train(cfg)  # "killed" after the checkpoint of step 2, with step 3 written
    (killed / "checkpoints" / f"step-{steps - 2:06d}").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = steps
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))
    if sampler == "replay":
        assert read_table(full, "steps").to_pandas()["reused"].sum() > 0  # the buffer came back with its samples


@pytest.mark.parametrize("key,value,message", [
    ("pods.n", 3, "sampler.pods.n=3 is invalid: must be >= sampler.group_size=4"),
    ("dars.max_per_prompt", 2, "sampler.dars.max_per_prompt=2 is invalid: must be >= sampler.group_size=4"),
    ("dars.schedule", "xx", "sampler.dars.schedule='xx' is invalid: must be one of 'et', 'hw'"),
    ("replay.size", 0, "sampler.replay.size=0 is invalid: must be >= 1"),
])
def test_bad_sampler_settings_are_one_line_naming_the_key(tmp_path, key, value, message):
    cfg = tie_cfg(tmp_path, key.split(".")[0])
    block, name = key.split(".")
    setattr(getattr(cfg.sampler, block), name, value)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(cfg)


def test_a_reused_samples_ratio_divides_by_its_behaviour_log_probs():
    """Fresh rows' first ratio is exactly 1; a reused row's is the current policy over the one that sampled it."""
    import dataclasses

    from grpo_lab.model.load import eos_ids
    from grpo_lab.rollout.generate import sample_groups, split_groups
    from grpo_lab.train.microbatch import micro_batches
    from grpo_lab.train.objective import grpo_loss
    from grpo_lab.train.update import TrainingRows, update

    model, tokenizer = load_policy("tiny", None, "cpu", "float32")
    ro = sample_groups(model, tokenizer, ["12+34=", "7+5="], 4, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(0), end_ids=eos_ids(model, tokenizer))
    with torch.no_grad():
        now = completion_logprobs(model, ro, 1.0, chunk=512)
    mask = ro.completion_mask
    stored = now - 0.3 * mask  # the policy that sampled them found every token 0.3 nats less likely
    ro = dataclasses.replace(ro, old_logp=stored)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    behaviour = torch.tensor([False] * 4 + [True] * 4)
    cfg = TrainConfig()
    cfg.algo.beta, cfg.algo.loss_agg, cfg.algo.mu = 0.0, "token", 1
    micro = micro_batches([[g] for g in split_groups(ro)], tokenizer.pad_token_id)
    out = update(model, None, torch.optim.SGD(model.parameters(), lr=0.0), micro,
                 TrainingRows(adv, torch.ones(8), behaviour=behaviour), cfg)
    _, want = grpo_loss(now, torch.where(behaviour[:, None], stored, now), adv, mask, beta=0.0, agg="token")
    assert out["pg_loss"] == pytest.approx(want.pg_loss, rel=1e-5) and out["clip_frac"] == pytest.approx(
        want.clip_frac, rel=1e-6)
    # e^0.3 = 1.35 > 1.2: the reused rows with A > 0 are clipped, every token of them, and nothing else is
    assert out["clip_frac"] > 0 and out["clip_frac"] == pytest.approx(float(mask[4:6].sum() / mask.sum()), rel=1e-6)
    torch.testing.assert_close(out["behaviour"][:, :now.shape[1]], now,
                               atol=1e-6, rtol=0)  # this pass's, for the buffer
