"""Data parallel under a real torchrun (gloo on CPU, one thread a rank): the update of 2 ranks equals
one process's on the combined batch; whole runs; a dead or stuck rank fails the run; resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from dist_worker import SPLITS, apply_update
from reference import assert_same_rows

from grpo_lab.advantage.grpo import group_advantages
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.rollout.generate import sample_groups, split_groups
from grpo_lab.run.checkpoints import read_state
from grpo_lab.run.tables import MISMATCH, read_table
from grpo_lab.samplers import PromptStream
from grpo_lab.tasks import build_task
from grpo_lab.train.objective import AGG_MODES
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "dist_worker.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def torchrun(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                           *args], cwd=ROOT, env=ENV, text=True, capture_output=True, timeout=timeout)


def assert_same_step(got: dict, one: dict, agg: str, split: str) -> None:
    """Two ranks' step against one process's: weights after mu=2 SGD steps, the last step's clipped gradient,
    element by element (measured: <= 2.3e-7, float32 rounding of differently padded shards; a local normaliser is
    off by ~50%), and every statistic."""
    assert (got["weights"] - one["weights"]).abs().max() <= 1e-6, (agg, split)
    assert (got["grads"] - one["grads"]).abs().max() <= 1e-6, (agg, split)
    for key, value in one["stats"].items():
        # the gradient norm sums squares over shards in another order: float rounding, measured 1.6e-6 relative.
        # The rollout/train mismatch of one policy against itself is float32 rounding of log-probs of magnitude
        # up to ~16 (an ulp there is 1.9e-6): its max over tokens is a few ulps either way, 9.5e-7 against 2.9e-6
        # measured on an AMX machine (2026-12-05), so it is held to a few ulps, not to 1e-6
        tolerance = 8e-6 if key == "mismatch" else 1e-6
        assert got["stats"][key] == pytest.approx(value, rel=1e-5, abs=tolerance, nan_ok=True), (agg, split, key)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_rank_update_equals_one_process_on_the_combined_batch(tmp_path, strategy):
    model, tokenizer = load_policy("tiny", None, "cpu", "float32")
    prompts = ["12+34=", "7+5=", "305+117=", "1+2="]  # prompts of different lengths: re-padding differs per rank
    ro = sample_groups(model, tokenizer, prompts, 4, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(0), end_ids=eos_ids(model, tokenizer))
    groups = split_groups(ro)
    rewards = torch.tensor([[1, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=torch.float32)  # one tie
    advantages = list(group_advantages(rewards))  # (4,) per group
    data = {"base": model.state_dict(), "groups": groups, "advantages": advantages, "pad_id": tokenizer.pad_token_id}
    torch.save(data, tmp_path / "batch.pt")

    out = torchrun(str(WORKER), "update", str(tmp_path / "batch.pt"), str(tmp_path / "two.pt"), strategy)
    assert out.returncode == 0, out.stderr[-3000:]
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    assert {v["strategy"] for v in two.values()} == {strategy}
    base = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for agg in AGG_MODES:
        one = apply_update(data["base"], groups, advantages, agg, tokenizer.pad_token_id)
        assert (one["weights"] - base).abs().max() > 1e-4  # the step moved the weights
        for split in SPLITS:
            assert_same_step(two[agg, split], one, agg, split)
            assert_same_trained_rows(two[agg, split]["rows"], one["rows"][0], ORDER[split], ("advantages", "behaviour"))
        assert one["stats"]["grad_norm"] > 0 and one["stats"]["kl"] > 0  # a real step: mu=2 moved the policy


ORDER = {"even": [0, 2, 1, 3], "even-micro": [0, 2, 1, 3], "lopsided": [0, 1, 2, 3]}  # the groups in rank order


def assert_same_trained_rows(ranks: list[dict], one: dict, order: list[int], keys: tuple[str, ...]) -> None:
    """What each of the 16 rows trained with on two ranks (rank 0's rows, then rank 1's) against one process's:
    its advantage, its entropies, its first-pass log-probs (padded to one width). Measured: up to 3.2e-6 relative,
    float32 rounding of rows padded to another width on each rank and of the chunked head (even-micro) against full
    logits; RL-ZVP's shaped advantages carry the entropies' rounding."""
    for key in keys:
        tol = 1e-5
        width = one[key].shape[1] if one[key].dim() > 1 else None
        parts = [r[key] if width is None else torch.nn.functional.pad(r[key], (0, width - r[key].shape[1]))
                 for r in ranks if key in r and r[key].shape[0]]
        by_group = torch.cat(parts).reshape(4, 4, -1)
        want = one[key].reshape(4, 4, -1)[order]
        torch.testing.assert_close(by_group, want, atol=tol, rtol=tol, equal_nan=True)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_rank_update_with_ties_masked_and_dropped_equals_one_process(tmp_path, strategy):
    """Tied units' KL masked and left out of the denominator (grpo_lab/advantage/ties.py), with the KL-gradient
    probe under ddp (fsdp refuses it): two ranks take one process's step, every rank's rows its own share of the
    denominator that leaves the tied group out, and measure the same tied share and KL-gradient norms."""
    model, tokenizer = load_policy("tiny", None, "cpu", "float32")
    ro = sample_groups(model, tokenizer, ["12+34=", "7+5=", "305+117=", "1+2="], 4, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(2), end_ids=eos_ids(model, tokenizer))
    groups = split_groups(ro)
    rewards = torch.tensor([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.float32)  # 2 tied
    advantages = list(group_advantages(rewards))
    tied = [torch.full((4,), bool((a == 0).all())) for a in advantages]
    keys = {"tied_kl": "mask", "tied_norm": "drop"}
    moved = {k: v + 0.01 * torch.randn(v.shape, generator=torch.Generator().manual_seed(3)) if v.is_floating_point()
             else v for k, v in model.state_dict().items()}  # the reference, a little off the policy
    data = {"base": model.state_dict(), "groups": groups, "advantages": advantages, "pad_id": tokenizer.pad_token_id,
            "tied": tied, "keys": keys, "probe": strategy == "ddp", "ref": moved}
    torch.save(data, tmp_path / "batch.pt")
    out = torchrun(str(WORKER), "update", str(tmp_path / "batch.pt"), str(tmp_path / "two.pt"), strategy)
    assert out.returncode == 0, out.stderr[-3000:]
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    for agg in AGG_MODES:
        one = apply_update(data["base"], groups, advantages, agg, tokenizer.pad_token_id, tied=tied, keys=keys,
                           probe=strategy == "ddp", ref_base=moved)
        plain = apply_update(data["base"], groups, advantages, agg, tokenizer.pad_token_id, ref_base=moved)
        tokens = [float(g.completion_mask.sum()) for g in groups]
        share = (tokens[1] + tokens[3]) / sum(tokens) if agg == "token" else 0.5  # two of four groups, weight 1
        assert one["stats"]["tied_norm_share"] == pytest.approx(share, rel=1e-12)
        assert plain["stats"]["tied_norm_share"] == 0  # rows not marked tied: the paper's loss, nothing dropped
        assert (one["weights"] != plain["weights"]).any()
        if strategy == "ddp":
            assert one["stats"]["kl_grad_tied"] == 0 and one["stats"]["kl_grad_untied"] > 0  # masked: none from ties
        for split in SPLITS:
            assert_same_step(two[agg, split], one, agg, split)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_rank_shaped_and_reused_update_equals_one_process(tmp_path, strategy):
    """RL-ZVP's tied groups (shaped per token from each rank's own entropies) and a reused group (its ratio over its
    stored log-probs): two ranks take one process's step on the combined batch, and each row trained with the same."""
    import dataclasses

    from grpo_lab.model.logprobs import completion_logprobs

    model, tokenizer = load_policy("tiny", None, "cpu", "float32")
    ro = sample_groups(model, tokenizer, ["12+34=", "7+5=", "305+117=", "1+2="], 4, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(1), end_ids=eos_ids(model, tokenizer))
    groups = split_groups(ro)
    with torch.no_grad():
        earlier = completion_logprobs(model, groups[3], 1.0) - 0.2 * groups[3].completion_mask
    groups[3] = dataclasses.replace(groups[3], old_logp=earlier)  # drawn by an earlier policy: reused now
    rewards = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 1, 1]], dtype=torch.float32)
    advantages = list(group_advantages(rewards))
    direction = [torch.full((4,), d, dtype=torch.int8) for d in (1, 0, -1, 0)]  # a positive and a negative prompt
    behaviour = [torch.full((4,), i == 3) for i in range(4)]
    data = {"base": model.state_dict(), "groups": groups, "advantages": advantages, "pad_id": tokenizer.pad_token_id,
            "direction": direction, "behaviour": behaviour}
    torch.save(data, tmp_path / "batch.pt")
    out = torchrun(str(WORKER), "update", str(tmp_path / "batch.pt"), str(tmp_path / "two.pt"), strategy)
    assert out.returncode == 0, out.stderr[-3000:]
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    for agg in AGG_MODES:
        one = apply_update(data["base"], groups, advantages, agg, tokenizer.pad_token_id, direction=direction,
                           behaviour=behaviour)
        (rows,) = one["rows"]
        assert (rows["advantages"][:4] > 0).all() and (rows["advantages"][8:12] < 0).all()  # tied, informative
        assert one["stats"]["informative"] == 16 and one["stats"]["clip_frac"] > 0  # the reused rows are clipped
        for split in SPLITS:
            assert_same_step(two[agg, split], one, agg, split)
            assert_same_trained_rows(two[agg, split]["rows"], rows, ORDER[split],
                                     ("advantages", "entropy", "behaviour"))


def test_fsdp_rollout_gathers_once_and_decodes_without_collectives(tmp_path):
    """Ranks decode different rounds, prompt counts and lengths (one has an empty round, one a split call) inside one
    `gathered` block: no collective runs there (else a rank that stops early would leave the other waiting), and
    the tokens are an unsharded copy's, bit for bit. Outside it each rank holds half the weights."""
    out = torchrun(str(WORKER), "rollout", str(tmp_path / "rollout.pt"))
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = torch.load(tmp_path / "rollout.pt", weights_only=True)
    assert [r["collectives"] for r in ranks] == [0, 0]
    assert [len(r["same"]) for r in ranks] == [2, 2] and all(all(r["same"]) for r in ranks)
    assert ranks[0]["lengths"] != ranks[1]["lengths"]  # the ranks really decoded different work
    for r in ranks:
        assert r["gathered_bytes"] == r["whole_bytes"]
        assert r["shard_bytes"] == pytest.approx(r["whole_bytes"] / 2, rel=0.01)  # Shard(0), rows padded to 2


def test_a_stuck_rank_fails_the_run_after_the_timeout():
    out = torchrun(str(WORKER), "stuck", "3")
    assert out.returncode != 0
    assert "Timed out" in out.stdout + out.stderr  # gloo's collective timeout, from dist.timeout_s


def _train_cmd(run: Path, *overrides: str, levels: str = "1,4") -> list[str]:
    return ["-m", "experiments.train", "prompts_per_step=5", "sampler.group_size=4", f"task.levels=[{levels}]",
            "task.train_per_level=8", "task.eval_per_level=3", "eval.n=4", "threads=1", f"hydra.run.dir={run}",
            *overrides]


# levels 1 and 4 tie often (resample_on_tie resamples); dynamic needs untied groups to fill its batch
@pytest.mark.parametrize("sampler,levels", [("fixed", "1,4"), ("resample_on_tie", "1,4"), ("dynamic", "2,3")])
def test_two_rank_run_tables(tmp_path, sampler, levels):
    run = tmp_path / "run"
    rounds = [] if sampler == "fixed" else [f"sampler.{sampler}.max_rounds=3"]
    out = torchrun(*_train_cmd(run, "max_steps=3", f"sampler={sampler}", *rounds, levels=levels))
    assert out.returncode == 0, out.stderr[-3000:]
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "done" and meta["world_size"] == 2
    g = read_table(run, "groups").to_pandas()
    steps = read_table(run, "steps").to_pandas()
    last = 3 if not meta["stopped"] else steps["step"].max()  # dynamic may hit its cap: a global stop
    assert steps["step"].tolist() == list(range(1, last + 1))  # one row a step
    # every draw of fresh prompts takes the single-process stream's next 5, once each, rank r drawing r, r+2, ...
    from grpo_lab.config import TaskConfig

    task = TaskConfig(levels=[int(x) for x in levels.split(",")], train_per_level=8, eval_per_level=3)
    stream = PromptStream(build_task(task).train, seed=0)
    for step, rows in g.groupby("step"):
        first = rows[rows["round"] == 0]
        takes = len(first) // 5  # dynamic draws up to max_rounds batches of fresh prompts; the others one
        assert len(first) == 5 * takes and 1 <= takes <= (3 if sampler == "dynamic" else 1), step
        assert first["prompt_id"].tolist() == [p.prompt_id for p in stream.take(5 * takes)], step
        assert first["rank"].tolist() == [0, 1, 0, 1, 0] * takes
        assert sampler == "dynamic" or first["prompt_id"].is_unique  # 15 draws from a pool of 16: no epoch wraps
    assert g["samples_total"].tolist() == g["group_size"].cumsum().tolist()  # counted once, globally
    assert steps["samples_total"].tolist() == g.groupby("step")["samples_total"].max().tolist()
    assert steps["groups"].tolist() == g.groupby("step").size().tolist()
    if sampler == "resample_on_tie":
        assert (g["round"] > 0).any() and set(g.loc[g["round"] > 0, "rank"]) == {0, 1}
    if sampler == "dynamic":  # a full batch of untied groups trains, or the cap stopped the run
        used = g[g["used"]].groupby("step").size().reindex(steps["step"], fill_value=0)
        assert (~g.loc[g["used"], "tie"]).all() and set(used.iloc[:-1]) <= {5}
    ev = read_table(run, "eval").to_pandas()
    assert sorted(set(ev["step"])) == [0, last]
    assert (ev.groupby(["step", "prompt_id"])["sample"].apply(list) == [[0, 1, 2, 3]] * 12).all()  # 6 prompts x 2
    assert np.isfinite(steps["loss"].iloc[:-1]).all()


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((int(e[5:]) for e in env if e.startswith(b"RANK=")), None)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_killed_rank_fails_the_run_and_the_same_command_resumes(tmp_path, strategy):
    run = tmp_path / "run"
    args = ("max_steps=12", "checkpoint_every=2", "eval=none", f"dist.strategy={strategy}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           *_train_cmd(run, *args)]
    agent = subprocess.Popen(cmd, cwd=ROOT, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not (run / "checkpoints" / "step-000002").exists() and agent.poll() is None:
            time.sleep(0.01)
        rank1 = [p for p in _children(agent.pid) if _rank_of(p) == 1]
        assert rank1, "rank 1 not found"
        os.kill(rank1[0], signal.SIGKILL)
        _, err = agent.communicate(timeout=300)  # rank 0 must not hang: it fails, torchrun reports it
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode != 0
    meta = json.loads((run / "run.json").read_text())
    # Rank 0 records `failed` when its SIGTERM lands in Python; when it is stuck in a gloo call past
    # torchrun's grace period it is SIGKILLed unrecorded, and the next start says so (grpo_lab.run.guards).
    assert meta["status"] in ("failed", "running"), meta
    assert read_table(run, "steps").num_rows < 12

    again = subprocess.run(cmd, cwd=ROOT, env=ENV, text=True, capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    if meta["status"] == "running":
        assert "ended without recording how" in again.stderr
    assert json.loads((run / "run.json").read_text())["status"] == "done"
    steps = read_table(run, "steps").to_pandas()
    assert steps["step"].tolist() == list(range(1, 13))
    g = read_table(run, "groups").to_pandas()
    assert g["samples_total"].tolist() == g["group_size"].cumsum().tolist()  # no step lost or counted twice
    full = tmp_path / "full"  # the same run, never interrupted: the resumed one redrew exactly its rows
    whole = torchrun(*_train_cmd(full, *args))
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert (read_table(run, "groups").drop_columns(["run_id"]).to_pylist()
            == read_table(full, "groups").drop_columns(["run_id"]).to_pylist())

    one = subprocess.run([sys.executable, *_train_cmd(run, *args, "max_steps=14")],
                         cwd=ROOT, env=ENV, text=True, capture_output=True, timeout=600)
    assert one.returncode != 0
    assert "saved by 2 process(es), this run has 1; resume with the same number" in one.stderr
    other = "ddp" if strategy == "fsdp" else "fsdp"
    moved = torchrun(*_train_cmd(run, *args, "max_steps=14", f"dist.strategy={other}"))  # the other strategy: refused
    assert moved.returncode != 0 and f"dist.strategy {strategy!r} -> {other!r}" in moved.stderr
    assert json.loads((run / "run.json").read_text())["status"] == "done"  # the finished run is left as it was


def test_world_size_one_is_unchanged(tiny_cfg):
    """One process: rank 0's seed is the run's seed and every group's rank is 0."""
    tiny_cfg.max_steps = 1
    run = train(tiny_cfg)
    g = read_table(run, "groups").to_pandas()
    assert set(g["rank"]) == {0} and json.loads((run / "run.json").read_text())["world_size"] == 1


@pytest.mark.parametrize("sampler,rule", [("pods", "ngrpo"), ("dars", "grpo")])
def test_two_rank_runs_of_pods_and_dars_recount(tmp_path, sampler, rule):
    from test_samplers_ties import recount, recount_advantages

    run = tmp_path / "run"
    own = {"pods": "sampler.pods.n=8", "dars": "sampler.dars.max_per_prompt=12"}[sampler]  # a key only it reads
    out = torchrun(*_train_cmd(run, "max_steps=3", f"sampler={sampler}", f"algo.advantage={rule}", own, "eval=none",
                               levels="1,2,4"))
    assert out.returncode == 0, out.stderr[-3000:]
    g, _ = recount(run)
    assert set(g["rank"]) == {0, 1} and recount_advantages(g, rule, m=4 if sampler == "pods" else None) > 0


def test_two_rank_replay_keeps_one_buffer_resumes_exactly(tmp_path):
    """Every rank holds the same buffer (scores, advantages) and the completions it drew itself; the replayed groups
    train on their own rank; a checkpoint keeps every rank's share and a resumed run redraws the same rows."""
    from test_samplers_ties import buffer_from_table, recount, recount_advantages

    args = ("sampler=replay", "algo.advantage=rl_zvp", "checkpoint_every=1", "eval=none")
    full = tmp_path / "full"
    out = torchrun(*_train_cmd(full, "max_steps=5", *args, levels="1,2,4"))
    assert out.returncode == 0, out.stderr[-3000:]
    g, s = recount(full)
    assert recount_advantages(g, "rl_zvp") > 0 and s["reused"].sum() > 0
    assert set(g.loc[g["reused"], "rank"]) == {0, 1}  # each rank trains the replays of what it drew
    state = read_state(full / "checkpoints" / "step-000005")["counters"]
    ranks = state["ranks_sampler"]
    meta = [[(e["step"], e["problem"].prompt_id, e["score"], e["rank"], e["advantages"].tolist()) for e in r["buffer"]]
            for r in ranks]
    assert meta[0] == meta[1] and len(meta[0]) > 2
    assert [(m[0], m[1], m[2]) for m in meta[0]] == [(e["step"], e["prompt_id"], e["score"])
                                                      for e in buffer_from_table(g, 64)]
    for r, share in enumerate(ranks):  # completions only where they were drawn
        assert all((e["samples"] is not None) == (e["rank"] == r) for e in share["buffer"])

    killed = tmp_path / "killed"
    out = torchrun(*_train_cmd(killed, "max_steps=4", *args, levels="1,2,4"))
    assert out.returncode == 0, out.stderr[-3000:]
    (killed / "checkpoints" / "step-000004").rename(killed / "checkpoints" / ".gone")  # step 4 written, not saved
    out = torchrun(*_train_cmd(killed, "max_steps=5", *args, levels="1,2,4"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_rows(full, killed, ("groups", "steps"))


def _same_weights(a: Path, b: Path, atol: float) -> float:
    """Largest difference between two checkpoint folders' weights, each read by transformers' from_pretrained."""
    from transformers import AutoModelForCausalLM

    ma, mb = (AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32, trust_remote_code=False) for p in (a, b))
    assert ma.lm_head.weight is ma.model.embed_tokens.weight and mb.lm_head.weight is mb.model.embed_tokens.weight
    diff = max((pa - pb).abs().max().item() for pa, pb in zip(ma.parameters(), mb.parameters()))
    assert diff <= atol, diff
    return diff


# informative steps: levels 2 and 3 split groups; one-group micro-batches (ranks hold different numbers: padding)
# with the chunked head; resample_on_tie's extra rounds and dynamic's refills draw different numbers of prompts on
# each rank; replay trains reused rows (their ratio over stored log-probs) beside RL-ZVP's shaped ties
@pytest.mark.parametrize("sampler,levels,extra", [("fixed", "2,3", ()), ("resample_on_tie", "1,4", ()),
                                                  ("dynamic", "2,3", ()),
                                                  ("replay", "1,2,4", ("algo.advantage=rl_zvp",))])
def test_fsdp_run_equals_the_ddp_run(tmp_path, sampler, levels, extra):
    """Two ranks under dist.strategy=fsdp draw the same groups and eval rows as under ddp, with the same losses (to
    float rounding, magnified by Adam: measured <= 1.5e-5 relative over 4 steps); the fsdp checkpoint is an ordinary
    transformers folder, holding the ddp run's weights, that standalone evaluation reads."""
    rounds = [f"sampler.{sampler}.max_rounds=3"] if sampler in ("resample_on_tie", "dynamic") else []
    args = ("max_steps=4", f"sampler={sampler}", *rounds, *extra, "algo.micro_batch_groups=1", "model.logprob_chunk=16",
            "eval.every=2", "checkpoint_every=2", "checkpoint.final_weights_only=true")
    runs = {}
    for strategy in ("ddp", "fsdp"):
        runs[strategy] = tmp_path / strategy
        out = torchrun(*_train_cmd(runs[strategy], *args, f"dist.strategy={strategy}", levels=levels))
        assert out.returncode == 0, out.stderr[-3000:]
        assert json.loads((runs[strategy] / "run.json").read_text())["strategy"] == strategy
    ddp, fsdp = runs["ddp"], runs["fsdp"]
    # what was drawn and scored: identical; what the policy computed after earlier steps' updates (RL-ZVP's
    # entropies and shaped advantages), and the steps' losses: to float rounding (Adam magnifies it: measured
    # <= 1.5e-5 relative over 4 steps). informative is a count: exact
    shaped = ("advantages", "entropy_mean", "entropy_max") if "algo.advantage=rl_zvp" in extra else ()
    assert_same_rows(ddp, fsdp, ("groups", "eval"), approx=shaped)
    assert_same_rows(ddp, fsdp, ("steps",), approx=("loss", "pg_loss", "kl", "grad_norm", "clip_frac"),
                     rounding=MISMATCH)
    a, b = read_table(ddp, "steps").to_pandas(), read_table(fsdp, "steps").to_pandas()
    assert (a["informative"] > 0).sum() >= 2
    assert sampler != "replay" or a["reused"].sum() > 0
    if sampler == "resample_on_tie":
        assert (read_table(fsdp, "groups").to_pandas()["round"] > 0).any()
    final = int(b["step"].max())  # 4, or where dynamic's cap stopped both runs
    mid, ckpt = fsdp / "checkpoints" / "step-000002", fsdp / "checkpoints" / f"step-{final:06d}"
    assert not (mid / "sharded").exists() and (mid / "optim" / ".metadata").exists()  # staging gone; AdamW in DCP
    assert read_state(mid)["optimizer"] is None
    assert not (ckpt / "state.pt").exists() and not (ckpt / "optim").exists()  # final_weights_only: weights alone
    _same_weights(ddp / "checkpoints" / f"step-{final:06d}", ckpt, atol=1e-5)
    if sampler == "fixed":
        ev = subprocess.run([sys.executable, "-m", "experiments.evaluate", f"run_dir={fsdp}", "n=2", "steps=[2,4]"],
                            cwd=ROOT, env=ENV, text=True, capture_output=True, timeout=600)
        assert ev.returncode == 0, ev.stderr[-3000:]
        assert sorted(set(read_table(fsdp, "eval").to_pandas()["step"])) == [0, 2, 4]
