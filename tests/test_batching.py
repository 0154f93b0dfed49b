"""Training batches of units of any size equal the plain concatenation of the same samples, exactly,
and their log-probs equal those of each prompt's samples computed alone."""

import numpy as np
import pytest
import torch

from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.model.logprobs import completion_logprobs
from grpo_lab.rollout.generate import concat_groups, sample_groups, split_groups
from grpo_lab.samplers.base import Group
from grpo_lab.tasks import Problem
from grpo_lab.train.batching import training_batch


@pytest.fixture(scope="module")
def groups():
    model, tok = load_policy("tiny", None, device="cpu", dtype="float32")
    prompts = ["7+5=", "31+4=", "31+4=", "58+67="]  # the second prompt drawn twice: a unit of two rounds
    ro = sample_groups(model, tok, prompts, 4, max_new_tokens=6, temperature=1.0,
                       generator=torch.Generator().manual_seed(0), end_ids=eos_ids(model, tok))
    out = []
    for i, chunk in enumerate(split_groups(ro)):
        problem = Problem(f"q{i}", prompts[i], "0", "1")
        out.append(Group(problem, 0, chunk, np.zeros(4, np.float32), np.zeros(4, bool), True, used=True))
    return model, tok, out


def test_equal_units_are_the_plain_concatenation(groups):
    _, tok, g = groups
    batch, mask = training_batch([[x] for x in g], tok.pad_token_id)
    plain = concat_groups([x.samples for x in g], tok.pad_token_id)
    assert mask.all() and batch.group_size == 4
    for field in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "old_logp", "lengths"):
        assert torch.equal(getattr(batch, field), getattr(plain, field)), field


def test_unequal_units_and_a_train_mask(groups):
    model, tok, g = groups
    g[1].train = np.array([True, False, True, False])
    g[2].train = np.array([False, True, False, True])  # the unit of two rounds trains 4 of its 8 samples
    units = [[g[0]], [g[1], g[2]], [g[3]]]
    batch, mask = training_batch(units, tok.pad_token_id)
    assert mask.tolist() == [True] * 4 + [True, False, True, False, False, True, False, True] + [True] * 4
    assert batch.texts == [t for t, m in zip([t for x in g for t in x.samples.texts], mask) if m]
    assert_as_alone(model, batch, mask, g)
    g[1].train = g[2].train = None
    units = [[g[0]], [g[1], g[2]], [g[3]]]  # sizes 4, 8, 4: chunks of 4, the original groups
    batch, _ = training_batch(units, tok.pad_token_id)
    plain = concat_groups([x.samples for x in g], tok.pad_token_id)
    assert torch.equal(batch.completion_ids, plain.completion_ids) and torch.equal(batch.prompt_ids, plain.prompt_ids)


def test_groups_of_unequal_sizes_prefill_each_prompt_once_and_match_alone(groups):
    """A DARS-like batch: one prompt's 4 answers beside another's 3 of 4 (a train mask) and a third's two rounds.
    No size divides the others into the old common chunk (gcd 1 would prefill a prompt per answer): each group is
    one prompt row with its own count, and every log-prob equals its group's computed alone."""
    model, tok, g = groups
    g[1].train = np.array([True, True, False, True])
    units = [[g[0]], [g[1]], [g[2], g[3]]]
    batch, mask = training_batch(units, tok.pad_token_id)
    g[1].train = None
    assert batch.prompt_ids.shape[0] == 4  # a prompt row per group, not per answer
    assert batch.group_size.tolist() == [4, 3, 4, 4] and len(batch.texts) == 15
    assert_as_alone(model, batch, mask, g)


def assert_as_alone(model, batch, mask, groups):
    """The batch's log-probs equal each group's computed alone, at the samples `mask` keeps."""
    with torch.no_grad():
        got = completion_logprobs(model, batch, 1.0)
        alone = [completion_logprobs(model, x.samples, 1.0) for x in groups]
    width = got.shape[1]
    want = torch.cat([torch.nn.functional.pad(a, (0, width - a.shape[1])) for a in alone])[torch.from_numpy(mask)]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
