"""A real-shaped local model for tests and benchmarks, made here from nothing (no download): a
random-weight Qwen2 causal LM with a real fast byte-level BPE tokenizer (trained with `tokenizers`
on a small local corpus), ChatML special tokens and chat template, saved with save_pretrained so
AutoTokenizer and AutoModelForCausalLM load it like any Hub folder (model=local model.path=DIR).

    build_chat_model(tmp / "qwen2-chat")                      # tests: tiny vocabulary, loads in a second
    build_chat_model(tmp / "qwen2-real", vocab_size=151_936)  # benchmarks: Qwen2.5's output layer
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from grpo_lab.tasks.arithmetic import QUESTIONS

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2.5-Instruct's template in short: a default system turn, then <|im_start|>role\ncontent<|im_end|>\n.
CHATML_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _corpus() -> list[str]:
    """Text like what the model will see: the arithmetic questions in every format, a few replies."""
    lines = []
    for a in range(0, 100, 7):
        for b in range(0, 100, 11):
            lines += [q.format(a=a, b=b) for q in QUESTIONS.values()]
            lines += [f"{a} + {b} = {a + b}", f"The answer is \\boxed{{{a + b}}}.", f"Answer: {a + b}"]
    lines += ["You are a helpful assistant.", "system", "user", "assistant"]
    return lines


def build_tokenizer(bpe_vocab: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE like Qwen2's (digits one by one, any byte encodable), ChatML specials and template.
    eos is <|endoftext|> as in Qwen2 base models: the end of an assistant turn (<|im_end|>) is then
    known only from the chat template, as it must be for such tokenizers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bpe_vocab, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"], padding_side="left")
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_chat_model(folder: str | Path, *, vocab_size: int | None = None, hidden_size: int = 64, layers: int = 2,
                     heads: int = 4, kv_heads: int = 2, intermediate_size: int = 128, max_positions: int = 2048,
                     bpe_vocab: int = 512, seed: int = 0) -> Path:
    """Write a random-weight Qwen2 and its tokenizer into `folder` (created); returns the folder.
    vocab_size: rows of the embedding and output layer (default: the tokenizer's size rounded up to 64;
    151_936 for Qwen2.5's real shape). The weights are seeded: the same folder on every machine."""
    folder = Path(folder)
    tokenizer = build_tokenizer(bpe_vocab)
    rows = vocab_size or -(-len(tokenizer) // 64) * 64
    if rows < len(tokenizer):
        raise ValueError(f"vocab_size={rows} is below the tokenizer's {len(tokenizer)} tokens")
    config = Qwen2Config(
        vocab_size=rows, hidden_size=hidden_size, intermediate_size=intermediate_size, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():  # building must not move the caller's random stream
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
