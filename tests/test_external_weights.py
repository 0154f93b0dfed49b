"""The weights an engine outside the policy module is given (grpo_lab/rollout/external.py, `full_weights`) for a
LoRA policy of a model whose adapted layers have biases (Qwen2's q/k/v projections): every parameter of the merged
model, biases included. Pushing the merged weights alone left a vLLM engine (started with placeholder weights) on
its own random biases: log-probs 0.014 nats off on a random model, more on a real Qwen2.5, whose biases are large."""

from __future__ import annotations

import copy

import torch

from fixtures.models import adapted_copy, build_chat_model
from grpo_lab.rollout.external import full_weights


def test_a_lora_policy_with_biased_projections_pushes_every_merged_parameter(tmp_path):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(build_chat_model(tmp_path / "qwen2"), trust_remote_code=False)
    plain = dict(full_weights(base))
    assert any(n.endswith("q_proj.bias") for n in plain)  # Qwen2: biased q/k/v projections
    model, peft = adapted_copy(base)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("q_proj.base_layer.bias"):
                p.add_(1.0)  # a bias the engine can only know from the push
    pushed = dict(full_weights(model))
    merged = dict(full_weights(copy.deepcopy(peft).merge_and_unload()))
    assert pushed.keys() == merged.keys() == plain.keys()
    for name, weight in pushed.items():
        torch.testing.assert_close(weight, merged[name])
