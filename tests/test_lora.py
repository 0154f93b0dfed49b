"""LoRA through peft (model.lora.rank > 0): only the adapters train, the reference is the base with the adapters
switched off (one copy of the base weights), checkpoints hold the adapters and their optimizer state, resume is
exact and evaluation loads the adapters onto the base. On the built-in model (a real run that learns) and on
the random Qwen2 at Qwen2.5's output-layer shape (151,936 tokens)."""

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from reference import assert_same_rows

from fixtures.models import build_chat_model
from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.jobs.evaluate import evaluate_checkpoints
from grpo_lab.model.load import frozen_copy, load_policy
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.model.lora import LoraConfig, adapters_off, add_adapters
from grpo_lab.rollout.generate import sample_groups
from grpo_lab.run.checkpoints import checkpoint_dir, checkpoint_steps
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.microbatch import MicroBatch
from grpo_lab.train.trainer import Trainer, train
from grpo_lab.train.update import TrainingRows, update

RANK = 4


def lora_cfg(cfg: TrainConfig, rank: int = RANK) -> TrainConfig:
    cfg.model.lora.rank = rank
    cfg.model.lora.targets = ["q_proj", "v_proj", "up_proj"]
    return cfg


def split(model) -> tuple[dict, dict]:
    """(base weights, adapter weights) of a model with adapters injected, by name."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return ({k: v for k, v in state.items() if "lora_" not in k}, {k: v for k, v in state.items() if "lora_" in k})


@pytest.mark.parametrize("dtype", ["auto", "autocast_bf16"])  # bf16: the frozen layers stored in it (store_frozen)
def test_a_lora_run_trains_only_adapters_resumes_exactly_and_evaluates_from_its_checkpoints(tiny_cfg, tmp_path, dtype):
    lora_cfg(tiny_cfg)
    tiny_cfg.model.dtype = dtype
    tiny_cfg.max_steps, tiny_cfg.checkpoint_every, tiny_cfg.eval.every = 4, 1, 2
    tiny_cfg.algo.lr = 1e-2  # adapters start at B = 0: a visible move in 4 steps
    full = train(tiny_cfg)
    ckpt = checkpoint_dir(full, 4)
    assert sorted(p.name for p in ckpt.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors",
                                                      "counters.json", "state.pt"]  # no model.safetensors
    assert checkpoint_steps(full, resumable=False) == [1, 2, 3, 4]
    steps = read_table(full, "steps").to_pandas()
    assert (steps["grad_norm"] > 0).any()  # it learned

    # only the adapters moved: the base weights equal a fresh copy of the built-in model, bitwise (in bf16, the
    # adapted linears and the output layer: the dtype autocast ran them in)
    base, _ = load_policy("tiny", None)
    trainer = Trainer(tiny_cfg, RunRecord(Path(tiny_cfg.out_dir), tiny_cfg.seed))  # resumes from step 4
    assert trainer.last_step == 4 and trainer.ref is trainer.peft
    trained_base, adapters = split(trainer.model)
    fresh = {k.replace(".base_layer", ""): v for k, v in trained_base.items()}
    assert fresh.keys() == base.state_dict().keys()
    assert all(torch.equal(v, base.state_dict()[k].to(v.dtype)) for k, v in fresh.items())
    lower = {k for k, v in trained_base.items() if v.dtype == torch.bfloat16}
    assert lower == (set() if dtype == "auto" else
                     {k for k in trained_base if ".base_layer." in k or k.startswith("lm_head.")})
    assert {v.dtype for v in adapters.values()} == {torch.float32}
    assert any(v.abs().sum() > 0 for k, v in adapters.items() if "lora_B" in k)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    assert len(params) == len(adapters) and len(trainer.optimizer.state) == len(params)
    trainer.scorer.close()

    # a run stopped after step 2 and resumed writes the same rows
    tiny_cfg.out_dir, tiny_cfg.max_steps = str(tmp_path / "killed"), 2
    killed = train(tiny_cfg)
    tiny_cfg.max_steps = 4
    train(tiny_cfg)
    assert_same_rows(full, killed, tables=("groups", "eval", "steps"))

    # experiments.evaluate's path: the base loaded once, each checkpoint's adapters onto it: the training's rows
    before = read_table(full, "eval").drop_columns(["run_id"]).to_pandas()
    tiny_cfg.out_dir = str(full)
    assert evaluate_checkpoints(tiny_cfg, full, n=tiny_cfg.eval.n, temperature=1.0, steps=[4, 0, 2],
                                overwrite=True) == [0, 2, 4]  # the same settings as the run's own: replaced
    after = read_table(full, "eval").drop_columns(["run_id"]).to_pandas()
    assert len(before) > 0 and before.equals(after)


@pytest.fixture(scope="module")
def qwen2_real(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-real", vocab_size=151_936)


def qwen2_cfg(folder: Path, out: Path) -> TrainConfig:
    cfg = TrainConfig(out_dir=str(out), max_steps=2, prompts_per_step=2)
    cfg.model.name, cfg.model.path = "hf", str(folder)
    cfg.task.chat_template, cfg.task.answer_format = True, "last_number"
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1], 4, 1
    cfg.sampler.group_size, cfg.rollout.max_new_tokens, cfg.eval.n = 4, 6, 0
    cfg.algo.lr = 1e-3
    return lora_cfg(cfg, rank=8)


def test_at_real_shape_only_adapters_change_and_the_reference_is_the_base(qwen2_real, tmp_path):
    cfg = qwen2_cfg(qwen2_real, tmp_path / "run")
    Path(cfg.out_dir).mkdir(parents=True)
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    base = copy.deepcopy(load_policy("hf", str(qwen2_real))[0])  # an untouched base: the reference's truth
    frozen = frozen_copy(base)
    before_base, before_adapters = split(trainer.model)
    n_all = sum(p.numel() for p in trainer.model.parameters())
    n_train = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    assert 0 < n_train < 0.01 * n_all  # the 151,936 x 64 embedding (tied output layer) does not train

    ro = sample_groups(trainer.model, trainer.tokenizer, [p.prompt for p in trainer.task.train[:2]], 4,
                       max_new_tokens=6, temperature=1.0, generator=torch.Generator().manual_seed(0),
                       end_ids=trainer.end_ids)
    with torch.no_grad():  # at init (B = 0) the adapted model is the base model
        at_init = completion_logprobs(trainer.model, ro, 1.0, chunk=512)
        assert torch.allclose(at_init, completion_logprobs(base, ro, 1.0, chunk=512), atol=1e-5, rtol=0)
    rows = TrainingRows.plain(torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 0.0, 0.0]))
    for _ in range(2):
        out = update(trainer.model, trainer.ref, trainer.optimizer, [MicroBatch(ro, slice(0, 8))], rows, cfg)
        assert out["grad_norm"] > 0
    after_base, after_adapters = split(trainer.model)
    assert all(torch.equal(v, after_base[k]) for k, v in before_base.items())  # bitwise: the base never moved
    moved = [k for k, v in before_adapters.items() if not torch.equal(v, after_adapters[k])]
    assert {k.split(".")[-3] for k in moved} == {"lora_A", "lora_B"}
    with torch.inference_mode(), adapters_off(trainer.ref) as reference:  # the reference after training steps
        assert torch.equal(completion_logprobs(reference, ro, 1.0, chunk=512),
                           completion_logprobs(frozen, ro, 1.0, chunk=512))
    with torch.no_grad():  # the adapters are back on after the block: the policy differs from the base again
        assert not torch.allclose(completion_logprobs(trainer.model, ro, 1.0, chunk=512), at_init, atol=1e-4)

    # the checkpoint: adapters and their optimizer state; a new job resumes with both, bitwise
    trainer.last_step = 1
    trainer.checkpoint()
    folder = checkpoint_dir(cfg.out_dir, 1)
    assert (folder / "adapter_model.safetensors").exists() and not (folder / "model.safetensors").exists()
    assert (folder / "adapter_model.safetensors").stat().st_size \
        < 0.05 * (qwen2_real / "model.safetensors").stat().st_size
    resumed = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    assert resumed.last_step == 1
    assert all(torch.equal(v, split(resumed.model)[1][k]) for k, v in after_adapters.items())
    saved, loaded = trainer.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert len(saved) == len(loaded) == sum(1 for p in trainer.model.parameters() if p.requires_grad)
    assert all(torch.equal(saved[i][m], loaded[i][m]) for i in saved for m in ("exp_avg", "exp_avg_sq"))
    trainer.scorer.close()
    resumed.scorer.close()


@pytest.mark.parametrize("override, key", [
    (dict(rank=-1), "model.lora.rank"), (dict(alpha=0.0), "model.lora.alpha"),
    (dict(dropout=1.0), "model.lora.dropout"), (dict(targets=[]), "model.lora.targets"),
])
def test_bad_lora_keys_name_themselves(override, key):
    cfg = TrainConfig()
    cfg.model.lora = dataclasses.replace(cfg.model.lora, **override)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg)


def test_targets_that_name_no_layer_list_the_models_linear_layers():
    model, _ = load_policy("tiny", None)
    cfg = TrainConfig().model.lora
    cfg.rank, cfg.targets = 2, ["q_proj", "qkv"]
    with pytest.raises(ConfigError, match=r"\['qkv'\].*down_proj.*q_proj"):
        add_adapters(model, cfg)


@pytest.fixture(scope="module")
def qwen2_small(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-small")


def test_frozen_layers_stored_in_bf16_give_autocasts_products_bit_for_bit(qwen2_small):
    """store_frozen (model.dtype=autocast_bf16, or "auto" on CUDA): the base linears and the output layer held in bf16
    draw the same tokens with the same log-probs, and give the same log-probs and adapter gradients on both output
    paths (chunked and whole logits), as the fp32 copy under bf16 autocast; biases, norms and the input embedding
    (untied from the output layer) keep fp32."""
    base = load_policy("hf", str(qwen2_small))[0]
    models = []
    for frozen in (None, torch.bfloat16):
        torch.manual_seed(0)  # peft draws A from the global RNG
        model, _ = add_adapters(copy.deepcopy(base), LoraConfig(rank=4, targets=["q_proj", "v_proj", "down_proj"]),
                                frozen)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
        models.append(model)
    wide, narrow = models
    stored = {name: p.dtype for name, p in narrow.named_parameters()}
    assert {n for n, d in stored.items() if d == torch.bfloat16} == \
        {n for n in stored if ".base_layer.weight" in n or n == "lm_head.weight"}
    assert narrow.get_input_embeddings().weight.dtype == torch.float32 \
        and narrow.get_output_embeddings().weight is not narrow.get_input_embeddings().weight
    assert any(n.endswith("base_layer.bias") for n in stored)  # Qwen2's q/v biases: kept fp32
    tokenizer = load_policy("hf", str(qwen2_small))[1]
    prompts = ["What is 12 + 30?", "What is 7 + 5?"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ro_wide, ro_narrow = (sample_groups(m, tokenizer, prompts, 4, max_new_tokens=8, temperature=1.0,
                                            generator=torch.Generator().manual_seed(0), end_ids=[]) for m in models)
        assert torch.equal(ro_wide.completion_ids, ro_narrow.completion_ids)
        assert torch.equal(ro_wide.old_logp, ro_narrow.old_logp)
        for chunk in (0, 16):  # the whole-logits path and the chunked output layer
            grads = []
            for m in models:
                m.zero_grad()
                logp = completion_logprobs(m, ro_wide, 1.0, chunk=chunk)
                (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
                grads.append((logp.detach(), {n: p.grad for n, p in m.named_parameters() if p.requires_grad}))
            assert torch.equal(grads[0][0], grads[1][0])
            assert grads[0][1].keys() == grads[1][1].keys() and len(grads[0][1]) == 12
            assert all(torch.equal(g, grads[1][1][n]) for n, g in grads[0][1].items())
