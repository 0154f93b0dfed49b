"""A character tokenizer for the built-in tiny model, a real transformers tokenizer (padding,
batch_decode, save/load) so the same code paths serve it and any Hub-style model."""

from __future__ import annotations

import json
import os

from transformers import PreTrainedTokenizer

SPECIALS = ("<pad>", "<eos>", "<unk>")
# Digits and operators for the arithmetic task, plus enough text for simple prompts.
CHARS = "0123456789+-*=()., \n" + "abcdefghijklmnopqrstuvwxyz" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + ":?/\\{}$^_"


class CharTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "vocab.json"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file: str | None = None, **kwargs):
        if vocab_file is not None:
            with open(vocab_file) as f:
                tokens = json.load(f)
        else:
            tokens = list(SPECIALS) + list(CHARS)
        self._vocab = {t: i for i, t in enumerate(tokens)}
        self._inverse = dict(enumerate(tokens))
        kwargs.setdefault("pad_token", "<pad>")
        kwargs.setdefault("eos_token", "<eos>")
        kwargs.setdefault("unk_token", "<unk>")
        kwargs.setdefault("padding_side", "left")  # generation continues prompts on the right
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return list(text)

    def _convert_token_to_id(self, token: str) -> int:
        return self._vocab.get(token, self._vocab["<unk>"])

    def _convert_id_to_token(self, index: int) -> str:
        return self._inverse.get(index, "<unk>")

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def _decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str:
        # One character per id: a join, instead of the generic token-merging path (hot in rollouts).
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        skip = set(self.all_special_ids) if skip_special_tokens else ()
        return "".join(self._inverse.get(i, "<unk>") for i in token_ids if i not in skip)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "vocab.json")
        with open(path, "w") as f:
            json.dump([self._inverse[i] for i in range(len(self._inverse))], f)
        return (path,)
