"""Example completions: which groups are picked (the latest of each kind per difficulty), that each shows its
question (the last user turn of a chat-templated prompt, never its system line), and that untrusted text cannot
break the markdown."""

import re

import pandas as pd

from analysis.sections.examples import base_replies, code, examples_markdown, pick_groups, question_text


def _group(job, step, group, difficulty, correct, texts=None, size=None):
    g = len(correct)
    n = sum(correct)
    tie = n in (0, g)
    kind = ("all_correct" if n == g else "all_wrong") if tie else None
    texts = texts or [str(i) for i in range(g)]
    return [dict(job=job, step=step, group=group, prompt_id=f"{difficulty}-{step}-{group}", difficulty=difficulty,
                 round=0, sample=j, group_size=size or g, prompt=f"{difficulty}+{step}=", completion=texts[j],
                 reward=float(c), correct=bool(c), truncated=False, tie=tie, tie_kind=kind, used=True)
            for j, c in enumerate(correct)]


def _frame():
    rows = []
    rows += _group("0", 1, 0, "2", [1, 0, 1, 0])  # mixed, early
    rows += _group("0", 5, 0, "2", [1, 1, 0, 0])  # mixed, latest: picked
    rows += _group("0", 5, 1, "2", [1, 1, 1, 1])  # all-correct
    rows += _group("1", 3, 0, "10", [0, 0, 0, 0])  # all-wrong, level 10 sorts after 2
    rows += _group("1", 3, 1, "10", [0, 1], size=4)  # a group cut short by log_completions
    return pd.DataFrame(rows)


def test_picks_the_latest_group_of_each_kind_per_difficulty_in_natural_order():
    picked = pick_groups(_frame())
    assert list(zip(picked.difficulty, picked.kind, picked.step, picked.group)) == [
        ("2", "mixed", 5, 0), ("2", "all_correct", 5, 1), ("10", "mixed", 3, 1), ("10", "all_wrong", 3, 0)]


def test_markdown_shows_every_kept_completion_with_its_reward():
    text = examples_markdown(_frame())
    assert text.index("#### Difficulty 2") < text.index("#### Difficulty 10")
    assert "**Mixed group** (2/4 correct; job 0, step 5, prompt `2-5-0`): `2+5=`" in text
    assert "**All-wrong tie** (0/4 correct; job 1, step 3" in text
    assert "1 of the 2 kept of 4 correct" in text
    assert "| 3 | `3` | 0 | no |" in text
    assert examples_markdown(pd.DataFrame()).startswith("No completions were kept")
    named = examples_markdown(_frame(), names={"2": "2+1 digits"})
    assert "#### Difficulty 2 (2+1 digits)\n" in named and "#### Difficulty 10\n" in named


def test_untrusted_text_stays_inside_its_cell():
    assert code("a|b\nc") == "`a\\|b⏎c`"
    assert code("x`y") == "`` x`y ``"
    assert code("") == "(empty)"
    assert code("9" * 100, max_chars=5) == "`99999…`"
    hostile = pd.DataFrame(_group("0", 1, 0, "1", [1, 0], texts=["| --- |\n# head", "<script>``"]))
    table_lines = [ln for ln in examples_markdown(hostile).splitlines() if ln.startswith("| 0") or ln.startswith("| 1")]
    assert len(table_lines) == 2
    assert all(len(re.findall(r"(?<!\\)\|", ln)) == 5 for ln in table_lines)  # four cells, no more


# a SmolLM2-style chat prompt (ChatML) with one worked example before the question
SMOLLM2 = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
           "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n"
           "<|im_start|>user\nWhat is 17 + 25? Give the number alone.<|im_end|>\n<|im_start|>assistant\n")


def test_an_example_shows_the_question_of_a_chat_prompt_not_its_system_line():
    frame = _frame().assign(prompt=SMOLLM2)
    text = examples_markdown(frame)
    assert "prompt `2-5-0`): `What is 17 + 25? Give the number alone.`" in text
    assert "You are a helpful" not in text and "What is 2 + 3?" not in text  # neither the system line nor a shot
    replies = base_replies(pd.DataFrame({"job": "0", "step": 0, "difficulty": "1", "prompt_id": "p", "answer": "42",
                                         "correct": True, "completion": "42", "prompt": [SMOLLM2]}))
    assert replies["question"].tolist() == ["What is 17 + 25? Give the number alone."]
    raw = frame.assign(question="the raw question")  # a column of the raw question wins over the prompt's text
    assert "prompt `2-5-0`): `the raw question`" in examples_markdown(raw)


def test_the_question_is_read_from_other_templates_or_the_prompts_tail():
    assert question_text("<|start_header_id|>user<|end_header_id|>\n\nQ1?<|eot_id|><|start_header_id|>assistant"
                         "<|end_header_id|>\n\n") == "Q1?"  # Llama 3
    assert question_text("<start_of_turn>user\nQ2?<end_of_turn>\n<start_of_turn>model\n") == "Q2?"  # Gemma
    assert question_text("<s>[INST] Q3? [/INST]") == "Q3?"  # Mistral
    assert question_text("<|user|>\nQ4?</s>\n<|assistant|>\n") == "Q4?"  # Zephyr
    long = "Solve the following problem step by step. " * 3 + "What is 6 * 7?"
    assert question_text(long) == "…" + long[-59:].lstrip() and question_text(long).endswith("What is 6 * 7?")
    assert code(question_text(long)).count("…") == 1  # the tail fits the cell: cut once, at its start
    assert question_text("2+5=") == "2+5=" and question_text(None) == ""
