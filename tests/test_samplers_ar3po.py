"""AR3PO: its rounds and reuse on a hand-built sequence of rounds whose decisions are known, a real tiny run whose
groups table shows every prompt stopped at its first right answer or at the cap and every all-wrong prompt with a
kept right answer trained with it (the store replayed from the table and found in the checkpoint), the kept
answers' behaviour log-probs against the checkpoint that sampled them, exact resume mid-run, the budget checks."""

import numpy as np
import pytest
import torch
from reference import assert_draw_bounds, assert_same_rows, plain_grpo

from grpo_lab.config import SamplerConfig, TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.model.load import load_policy
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.records import Group, Problem, Rollout
from grpo_lab.run.checkpoints import load_weights, read_state
from grpo_lab.run.tables import read_table
from grpo_lab.samplers import build_sampler
from grpo_lab.samplers.ar3po import another_round, latest_right
from grpo_lab.samplers.base import PromptStream
from grpo_lab.train.advantages import unit_advantages
from grpo_lab.train.trainer import train

ROUND, ROUNDS = 2, 3  # the hand-built sequence's round size and cap


def group(problem: Problem, rnd: int, correct: list[int]) -> Group:
    """A scored group with real (tiny) completions: sample j's tokens are 10 j + (0, 1, 2)."""
    n = len(correct)
    ro = Rollout(prompt_ids=torch.zeros(1, 2, dtype=torch.long), prompt_mask=torch.ones(1, 2, dtype=torch.long),
                 completion_ids=torch.arange(3).repeat(n, 1) + 10 * torch.arange(n)[:, None],
                 completion_mask=torch.ones(n, 3, dtype=torch.long), old_logp=torch.zeros(n, 3),
                 texts=[f"{problem.prompt_id}-{rnd}-{j}" for j in range(n)], lengths=torch.full((n,), 3),
                 truncated=torch.zeros(n, dtype=torch.bool), group_size=n)
    right = np.array(correct, bool)
    return Group(problem, rnd, ro, right.astype(np.float32), right, bool(right.all() or not right.any()),
                 tokens=3 * n)


class Script:
    """A DrawRound that answers from a script: prompt id -> each round's answers (1 right, 0 wrong)."""

    def __init__(self, answers: dict[str, list[list[int]]]):
        self.answers, self.calls = answers, []

    def __call__(self, problems, round, size=None):
        self.calls.append((sorted(p.prompt_id for p in problems), round, size))
        out = []
        for p in problems:
            assert len(self.answers[p.prompt_id][round]) == size
            out.append(group(p, round, self.answers[p.prompt_id][round]))
        return out


def test_the_rule_stops_at_a_right_answer_or_the_cap():
    assert another_round([np.array([0, 0], bool)], 3) and another_round([np.zeros(2, bool)] * 2, 3)
    assert not another_round([np.zeros(2, bool)] * 3, 3)  # the cap
    assert not another_round([np.zeros(2, bool), np.array([0, 1], bool)], 3)  # a right answer: stop
    assert not another_round([np.ones(2, bool)], 3)  # all right stops too
    p = Problem("p", "1+1=", "2", "1")
    assert latest_right([group(p, 0, [0, 0])]) is None
    g0, g1 = group(p, 0, [1, 0]), group(p, 1, [1, 1, 0])
    found = latest_right([g0, g1])
    assert found[0] is g1 and found[1] == 1  # the last right answer drawn


def test_a_hand_built_sequence_of_rounds_gives_the_known_stops_and_reuses():
    problems = {k: Problem(k, f"{k}?", "0", "1") for k in "ABCDE"}
    cfg = SamplerConfig(name="ar3po")
    cfg.ar3po.round_size, cfg.ar3po.max_rounds = ROUND, ROUNDS
    sampler = build_sampler(cfg, PromptStream(tuple(problems.values()), seed=0))
    wrong = [[0, 0]] * ROUNDS
    step1 = Script(dict(A=wrong, B=[[0, 1]], C=[[1, 1]], D=wrong, E=[[0, 0], [1, 0]]))
    draw = sampler.draw(step1, 5)
    assert step1.calls == [(list("ABCDE"), 0, 2), (list("ADE"), 1, 2), (list("AD"), 2, 2)]
    assert not any(g.reused for g in draw.groups) and all(g.used for g in draw.groups)  # nothing kept yet
    behaviour = {id(g): torch.full((2, 3), -1.0) - torch.arange(2)[:, None] for g in draw.groups}
    sampler.observe(1, draw, {}, behaviour)
    store = sampler.extra_state["store"]
    assert {k: (e["step"], e["round"], e["index"]) for k, e in store.items()} == {
        "B": (1, 0, 1), "C": (1, 0, 1), "E": (1, 1, 0)}  # each prompt's latest right answer; A and D had none
    torch.testing.assert_close(store["C"]["samples"].old_logp, torch.full((1, 3), -2.0))  # its behaviour row
    assert store["C"]["samples"].completion_ids.tolist() == [[10, 11, 12]] and store["C"]["tokens"] == 3
    saved = sampler.state_dict()

    step2 = Script(dict(A=[[1, 0]], B=[[0, 0], [0, 1]], C=wrong, D=wrong, E=[[1, 1]]))
    draw = sampler.draw(step2, 5)
    assert step2.calls == [(list("ABCDE"), 0, 2), (list("BCD"), 1, 2), (list("CD"), 2, 2)]
    units = {u[0].problem.prompt_id: u for u in draw.units}
    assert [len(units[k]) for k in "ABCDE"] == [1, 2, ROUNDS + 1, ROUNDS, 1]  # C: its rounds and the kept answer
    reused = units["C"][-1]
    assert [g for g in draw.groups if g.reused] == [reused] and reused.used
    assert (reused.source_step, reused.round, reused.rewards.tolist(), reused.correct.tolist()) == (1, 0, [1.0], [1])
    assert reused.samples is store["C"]["samples"] and reused.advantages is None and not reused.tie
    # the final group's advantages: the rule over C's six wrong answers and the kept right one, pooled
    adv = unit_advantages([units["C"]], "grpo")
    np.testing.assert_allclose(adv.advantages.numpy(), plain_grpo([0.0] * 6 + [1.0]), rtol=1e-6)
    assert adv.replayed.tolist() == [False] * 6 + [True]  # only the kept answer divides by its stored log-probs
    sampler.observe(2, draw, {}, {id(g): torch.zeros(len(g.rewards), 3) for g in draw.groups if not g.reused})
    assert {k: (e["step"], e["round"], e["index"]) for k, e in store.items()} == {
        "A": (2, 0, 0), "B": (2, 1, 1), "C": (1, 0, 1), "E": (2, 0, 1)}  # C keeps its answer: a reuse is not kept

    again = build_sampler(cfg, PromptStream(tuple(problems.values()), seed=0))
    again.load_state_dict(saved)  # the store comes back from a checkpoint's state and is reused the same way
    redo = again.draw(Script(step2.answers), 5)
    assert [(g.problem.prompt_id, g.round, g.reused) for g in redo.groups] == [
        (g.problem.prompt_id, g.round, g.reused) for g in draw.groups]
    torch.testing.assert_close([g for g in redo.groups if g.reused][0].samples.old_logp, torch.full((1, 3), -2.0))


def ar3po_cfg(tmp_path, steps: int = 8, **own) -> TrainConfig:
    """Four prompts a step from a pool of four, two-digit sums: often right, sometimes wrong to the cap."""
    cfg = TrainConfig(out_dir=str(tmp_path / "ar3po"), max_steps=steps, prompts_per_step=4, checkpoint_every=1)
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [2, 3], 2, 0
    s = cfg.sampler
    s.name, s.group_size = "ar3po", 4
    s.ar3po.round_size, s.ar3po.max_rounds = 2, 2
    for k, v in own.items():
        setattr(s.ar3po, k, v)
    return cfg


def recount(run):
    """The counters against the groups table: draws advance samples_total, reused answers do not."""
    g, s = read_table(run, "groups").to_pandas(), read_table(run, "steps").to_pandas()
    drawn = g["group_size"].where(~g["reused"], 0)
    assert g["samples_total"].tolist() == drawn.cumsum().tolist()
    assert g["tokens_total"].tolist() == g["tokens"].where(~g["reused"], 0).cumsum().tolist()
    per = g.assign(drawn=drawn, again=g["n_trained"].where(g["reused"], 0)).groupby("step").agg(
        samples=("drawn", "sum"), trained=("n_trained", "sum"), reused=("again", "sum"))
    for col in per.columns:
        assert s[col].tolist() == per[col].tolist(), col
    assert s["groups"].tolist() == (~g["reused"]).groupby(g["step"]).sum().tolist()
    return g, s


def test_a_real_run_stops_each_prompt_at_its_first_right_answer_and_reuses_kept_ones(tmp_path):
    cfg = ar3po_cfg(tmp_path, steps=10)
    run = train(cfg)
    g, s = recount(run)
    round_size, cap = cfg.sampler.ar3po.round_size, cfg.sampler.ar3po.max_rounds
    store: dict[str, tuple[int, int, int]] = {}  # the store replayed from the table: prompt -> (step, round, index)
    reuses = 0
    for step, rows in g.groupby("step", sort=True):
        assert rows["used"].all() and rows["unit"].notna().all()  # every group trains
        kept = {}
        for _, unit in rows.groupby("unit"):
            fresh, again = unit[~unit["reused"]], unit[unit["reused"]]
            pid = fresh["prompt_id"].iloc[0]
            assert (unit["prompt_id"] == pid).all() and fresh["round"].tolist() == list(range(len(fresh)))
            assert (fresh["group_size"] == round_size).all()
            right = fresh["n_correct"].tolist()
            assert all(r == 0 for r in right[:-1])  # no round after a right answer
            assert right[-1] > 0 or len(fresh) == cap  # stopped at its first right answer, or at the cap
            if sum(right) == 0 and pid in store:  # all wrong with a kept right answer: it trains with it
                assert len(again) == 1
                r = again.iloc[0]
                assert (r["source_step"], r["round"]) == store[pid][:2] and r["source_step"] < step
                assert (r["group_size"], r["n_correct"], r["n_trained"], r["tie"]) == (1, 1, 1, False)
                reuses += 1
            else:
                assert again.empty
            rewards = np.concatenate(unit["rewards"].tolist())  # the final group's advantages, pooled
            np.testing.assert_allclose(np.concatenate(unit["advantages"].tolist()), plain_grpo(rewards.tolist()),
                                       rtol=1e-5, atol=1e-6)
            last = fresh.iloc[-1]
            if last["n_correct"]:
                kept[pid] = (step, int(last["round"]), int(np.flatnonzero(last["correct"])[-1]))
        store.update(kept)  # kept after the step: reused from the next one on
        assert s.loc[s["step"] == step, "samples"].item() <= 4 * round_size * cap
    assert reuses >= 2 and s["reused"].sum() == reuses
    assert (g.loc[g["reused"]].apply(lambda r: r["advantages"][0] > 0, axis=1)).all()  # the right answer is pushed up
    state = read_state(run / "checkpoints" / "step-000010")["counters"]["sampler"]
    assert {k: (e["step"], e["round"], e["index"]) for k, e in state["store"].items()} == store
    assert len(state["store"]) <= len(set(g["prompt_id"]))  # one answer a prompt at most


def test_a_kept_answer_keeps_the_log_probs_of_the_policy_that_sampled_it(tmp_path):
    run = train(ar3po_cfg(tmp_path, steps=6))
    state = read_state(run / "checkpoints" / "step-000006")["counters"]["sampler"]
    later = [e for e in state["store"].values() if e["step"] > 1]
    assert later
    model, _ = load_policy("tiny", None, "cpu", "float32")
    for e in later:  # the policy that drew it: the weights of the checkpoint before its step
        assert e["samples"].completion_ids.shape[0] == 1 and e["samples"].old_logp.device.type == "cpu"
        load_weights(run / "checkpoints" / f"step-{e['step'] - 1:06d}", model)
        with torch.no_grad():
            want = completion_logprobs(model, e["samples"], 1.0, chunk=512)
        torch.testing.assert_close(e["samples"].old_logp, want, atol=1e-5, rtol=0)
        assert e["tokens"] == int(e["samples"].lengths.sum()) and e["correct"].tolist() == [True]


def test_resume_mid_run_restores_the_store_exactly(tmp_path):
    steps = 8
    full = train(ar3po_cfg(tmp_path / "full", steps=steps))
    cfg = ar3po_cfg(tmp_path / "killed", steps=steps - 2)
    killed = train(cfg)  # "killed" after the checkpoint of step 5, with step 6 written
    (killed / "checkpoints" / f"step-{steps - 2:06d}").rename(killed / "checkpoints" / ".gone")
    cfg.max_steps = steps
    train(cfg)
    assert_same_rows(full, killed, ("groups", "steps"))
    g = read_table(full, "groups").to_pandas()
    after = g[g["reused"] & (g["step"] > steps - 3)]
    assert (after["source_step"] <= steps - 3).any()  # a reuse after the resume of an answer kept before it
    ends = [read_state(r / "checkpoints" / f"step-{steps:06d}")["counters"]["sampler"]["store"] for r in (full, killed)]
    assert ends[0].keys() == ends[1].keys()
    for k, e in ends[0].items():
        assert (e["step"], e["index"]) == (ends[1][k]["step"], ends[1][k]["index"])
        torch.testing.assert_close(e["samples"].old_logp, ends[1][k]["samples"].old_logp, atol=0, rtol=0)


def test_budget_checks_know_its_draw(tmp_path):
    cfg = ar3po_cfg(tmp_path, steps=4, round_size=3, max_rounds=5)
    least, most = 4 * 3, 4 * 3 * 5
    assert_draw_bounds(cfg, least, most)


@pytest.mark.parametrize("key,value,message", [
    ("round_size", 1, "sampler.ar3po.round_size=1 is invalid: must be >= 2"),
    ("max_rounds", 0, "sampler.ar3po.max_rounds=0 is invalid: must be >= 1"),
])
def test_bad_settings_are_one_line_naming_the_key(tmp_path, key, value, message):
    cfg = ar3po_cfg(tmp_path, **{key: value})
    with pytest.raises(ConfigError, match=message) as err:
        validate(cfg)
    assert "\n" not in str(err.value)


@pytest.mark.heavy  # two torchrun runs and a resume: under a minute
def test_two_ranks_keep_one_store_and_resume_exactly(tmp_path):
    """Every rank keeps the same entries and the completions it drew itself; a kept answer trains on its rank; a
    checkpoint keeps every rank's share and a resumed run redraws the same rows."""
    from test_distributed import torchrun

    def cmd(run, steps):
        return ["-m", "experiments.train", "sampler=ar3po", "sampler.ar3po.round_size=2", "sampler.ar3po.max_rounds=2",
                "prompts_per_step=4", "task.levels=[2,3]", "task.train_per_level=2", "eval=none", "threads=1",
                "checkpoint_every=1", f"max_steps={steps}", f"hydra.run.dir={run}"]

    full, killed = tmp_path / "full", tmp_path / "killed"
    out = torchrun(*cmd(full, 8))
    assert out.returncode == 0, out.stderr[-3000:]
    g, s = recount(full)
    assert s["reused"].sum() > 0 and (g.loc[g["reused"], "n_trained"] == 1).all()
    ranks = read_state(full / "checkpoints" / "step-000008")["counters"]["ranks_sampler"]
    meta = [{k: (e["step"], e["index"], e["rank"], e["tokens"]) for k, e in r["store"].items()} for r in ranks]
    assert meta[0] == meta[1] and meta[0]
    for r, share in enumerate(ranks):  # completions only where they were drawn
        assert all((e["samples"] is not None) == (e["rank"] == r) for e in share["store"].values())
        assert all(int(e["samples"].lengths.sum()) == e["tokens"] for e in share["store"].values() if e["rank"] == r)
    out = torchrun(*cmd(killed, 6))
    assert out.returncode == 0, out.stderr[-3000:]
    (killed / "checkpoints" / "step-000006").rename(killed / "checkpoints" / ".gone")
    out = torchrun(*cmd(killed, 8))
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_rows(full, killed, ("groups", "steps"))
