"""Instruct models as their users run them, on a random-weight Qwen2 with a real BPE tokenizer and a
ChatML template built here (fixtures.models): chat prompts, end-of-turn tokens, stop strings,
answer formats, truncated completions out of the loss, and model=local end to end (train, eval, report)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from reference import both_pages

from fixtures.models import build_chat_model
from grpo_lab.config import TrainConfig
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.rewards.rules import RewardWeights, final_answer, score
from grpo_lab.rollout.generate import cut_at_stop, sample_groups
from grpo_lab.run.tables import read_table
from grpo_lab.tasks.arithmetic import ArithmeticTask
from grpo_lab.tasks.chat import chat_prompt, end_of_turn_ids, render_task
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parent.parent
W = RewardWeights(accuracy=1.0, format=0.5)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("models") / "qwen2-chat")


@pytest.fixture(scope="module")
def chat_model(chat_dir):
    return load_policy("hf", str(chat_dir))


@pytest.mark.parametrize("text,finished,correct,formatted", [
    ("3 + 4 = 7, so \\boxed{7}", True, True, True),
    ("\\boxed{ 7 }", True, True, True),
    ("\\boxed{007}", True, True, True),  # the same integer
    ("\\boxed{7} no wait \\boxed{8}", True, False, False),  # the last box is the final answer; two boxes: bad format
    ("\\boxed{8} no wait \\boxed{7}", True, False, False),  # two final answers that disagree: a hedge, wrong
    ("\\boxed{7", True, False, False),  # unclosed
    ("\\boxed{}", True, False, False),
    ("\\boxed{7abc}", True, False, False),  # whole, never a prefix
    ("\\boxed{7.5}", True, False, False),
    ("\\boxed{7e3}", True, False, False),
    ("\\boxed{7, 8}", True, False, False),
    ("the answer is 7", True, False, False),  # no box: nothing is read
    ("\\boxed{7}", False, True, False),  # truncated after the box: right, but the turn never ended
])
def test_boxed_answer_format(text, finished, correct, formatted):
    s = score(text, finished, "7", "integer", W, "boxed")
    assert (s.correct, s.formatted) == (correct, formatted)
    assert s.reward == 1.0 * correct + 0.5 * formatted


@pytest.mark.parametrize("text,correct,formatted", [
    ("3 + 4 = 7\nAnswer: 7", True, True),
    ("answer:7\n\n", True, True),
    ("Answer: 7.", True, True),  # sentence punctuation, not part of the number
    ("Answer: 7..", False, False),
    ("Answer: 7\nI hope that helps", False, False),  # not the last line: not the final answer
    ("Answer: 7.5", False, False),
    ("Answer: 7 or 8", False, False),
    ("Answer: 77", False, True),  # well formed, wrong
    ("My Answer: 7", False, False),  # the line must be the answer line, whole
    ("Answer: " + "7" * 300, False, False),  # an overlong line is not read
])
def test_answer_line_format(text, correct, formatted):
    s = score(text, True, "7", "integer", W, "answer_line")
    assert (s.correct, s.formatted) == (correct, formatted)
    assert final_answer("x\nAnswer:  12 ", "answer_line") == "12"


def test_arithmetic_prompts_state_their_format():
    bare = ArithmeticTask.build([1, 2], 4, 2, seed=7)
    for fmt, words in (("boxed", "\\boxed{}"), ("answer_line", '"Answer: N"'), ("number", "only the final number")):
        task = ArithmeticTask.build([1, 2], 4, 2, seed=7, answer_format=fmt)
        assert task.answer_format == fmt
        for p, q in zip(bare.train + bare.held_out, task.train + task.held_out):
            a, b = q.prompt_id.rsplit("-", 1)[1].split("+")
            assert (q.prompt_id, q.answer, q.difficulty) == (p.prompt_id, p.answer, p.difficulty)
            assert q.prompt.startswith(f"What is {a} + {b}?") and words in q.prompt and int(a) + int(b) == int(q.answer)


def test_chat_prompt_is_the_template_with_generation_prompt_and_one_bos(chat_model):
    _, tok = chat_model
    text = chat_prompt(tok, "What is 3 + 4?")
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nWhat is 3 + 4?<|im_end|>" in text
    ids = tok(text, add_special_tokens=False)["input_ids"]  # as the rollout tokenizes prompts
    reference = tok.apply_chat_template([{"role": "user", "content": "What is 3 + 4?"}], add_generation_prompt=True)
    assert ids == list(reference["input_ids"] if hasattr(reference, "keys") else reference)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids[1] != start  # the template's opening token once, never doubled
    with_system = chat_prompt(tok, "hi", system_prompt="Be brief.")
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") \
        and "helpful assistant" not in with_system
    task = render_task(ArithmeticTask.build([1], 2, 1, answer_format="boxed"), tok)
    assert all(p.prompt.startswith("<|im_start|>system") and p.prompt.endswith("assistant\n") for p in task.train)


def test_shots_are_earlier_turns_and_their_questions_leave_both_pools(chat_model):
    _, tok = chat_model
    shots = [["What is 2 + 5?", "2 + 5 = 7"], ["What is 3 + 1?", "3 + 1 = 4"]]
    text = chat_prompt(tok, "What is 6 + 1?", None, shots)
    assert text.endswith("<|im_start|>user\nWhat is 2 + 5?<|im_end|>\n<|im_start|>assistant\n2 + 5 = 7<|im_end|>\n"
                         "<|im_start|>user\nWhat is 3 + 1?<|im_end|>\n<|im_start|>assistant\n3 + 1 = 4<|im_end|>\n"
                         "<|im_start|>user\nWhat is 6 + 1?<|im_end|>\n<|im_start|>assistant\n")
    task = ArithmeticTask.build([1], 60, 20, answer_format="last_number")  # level 1 whole: 75 + 25 problems
    rendered = render_task(task, tok, None, shots)
    asked = {p.prompt_id for p in task.train + task.held_out}
    kept = {p.prompt_id for p in rendered.train + rendered.held_out}
    assert {"add-L1-2+5", "add-L1-3+1"} & asked and asked - kept == {"add-L1-2+5", "add-L1-3+1"} & asked and all(
        p.prompt.count("2 + 5 = 7") == 1 for p in rendered.train)


def test_a_base_model_gets_shots_as_plain_text_before_the_question(chat_model):
    """No chat template (a base model, model=gemma3): each shot its question, a line break, its answer and a blank
    line, then the question and a line break, so the reply stands where the shots' answers stood; task.shots is read
    (not refused as unread) with any model=hf model, and refused in one line with the built-in model."""
    from grpo_lab.config.checks import validate
    from grpo_lab.config.reads import unread
    from grpo_lab.errors import ConfigError
    from grpo_lab.jobs.loading import load_task_and_policy
    from grpo_lab.tasks import build_task

    cfg = TrainConfig()
    cfg.model.name, cfg.model.path = "hf", "unused: the policy is passed in"
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1], 60, 20
    cfg.task.answer_format = "last_number"
    cfg.task.shots = [["What is 2 + 5?", "7"], ["What is 3 + 1?", "4"]]
    assert unread("task.shots", cfg) == []
    task, *_ = load_task_and_policy(cfg, policy=chat_model)
    plain = {p.prompt_id: p.prompt for p in build_task(cfg.task).train}
    assert task.train and all(p.prompt == f"What is 2 + 5?\n7\n\nWhat is 3 + 1?\n4\n\n{plain[p.prompt_id]}\n"
                              for p in task.train)
    assert not {"add-L1-2+5", "add-L1-3+1"} & {p.prompt_id for p in task.train + task.held_out}
    cfg.model.name = "tiny"
    with pytest.raises(ConfigError, match=r"^task.shots=.* is invalid: needs a model=hf tokenizer") as e:
        validate(cfg)
    assert "\n" not in str(e.value)


def test_end_of_turn_is_read_from_the_template(chat_model):
    model, tok = chat_model
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token == "<|endoftext|>" and im_end not in eos_ids(model, tok)  # as in Qwen2 base tokenizers
    assert end_of_turn_ids(tok) == [im_end]


def test_stop_strings_end_completions_where_the_string_completes(chat_model):
    model, tok = chat_model
    prompts = [chat_prompt(tok, f"What is {a} + 5?") for a in range(4)]
    end = eos_ids(model, tok)

    def greedy(stop=()):
        return sample_groups(model, tok, prompts, 2, max_new_tokens=12, temperature=0.0,
                             generator=torch.Generator().manual_seed(0), end_ids=end, stop=stop)

    free = greedy()
    stop = [free.texts[0][3:6], free.texts[2][5:7]]  # strings the greedy replies are known to contain
    assert all(stop)
    cut = greedy(stop)
    for row in range(free.completion_ids.shape[0]):
        ids = free.completion_ids[row, : int(free.lengths[row])].tolist()
        # reference: the first token after which the decoded reply contains a stop string
        hit = next((t for t in range(len(ids))
                    if any(s in tok.decode(ids[: t + 1], skip_special_tokens=True) for s in stop)), None)
        length = len(ids) if hit is None else hit + 1
        assert int(cut.lengths[row]) == length
        assert cut.completion_ids[row, :length].tolist() == ids[:length]
        assert bool(cut.truncated[row]) == (hit is None and bool(free.truncated[row]))
        assert cut.texts[row] == cut_at_stop(tok.decode(ids[:length], skip_special_tokens=True), stop)
        assert not any(s in cut.texts[row] for s in stop)
    assert int(cut.lengths[0]) < int(free.lengths[0])


def test_mask_truncated_keeps_cut_completions_out_of_the_loss(tmp_path):
    """Two tokens per completion on level 2 (answers of 2 digits and the end token): every completion
    is cut, some still right ("57" of 57), so groups are mixed. With the mask the loss and gradient are
    exactly zero; without it, the same step learns."""

    def one_step(mask: bool, name: str):
        cfg = TrainConfig(out_dir=str(tmp_path / name), max_steps=1, prompts_per_step=4, seed=3)
        cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [2], 8, 1
        cfg.rollout.max_new_tokens, cfg.sampler.group_size, cfg.eval.n = 2, 8, 0
        cfg.algo.mask_truncated = mask
        train(cfg)
        return read_table(cfg.out_dir, "steps").to_pandas().iloc[0], read_table(cfg.out_dir, "groups").to_pandas()

    masked, groups = one_step(True, "masked")
    assert (~groups["tie"]).any()  # mixed groups: without the mask their advantages would move the policy
    assert masked["truncated"] == masked["samples"] == groups["truncated"].sum() == 32
    assert (groups["truncated"] == groups["group_size"]).all()
    assert masked["loss"] == 0.0 and masked["grad_norm"] == 0.0
    free, free_groups = one_step(False, "free")
    assert free_groups["n_correct"].tolist() == groups["n_correct"].tolist()  # the same draw
    assert free["grad_norm"] > 0


def test_local_chat_model_end_to_end(chat_dir, tmp_path):
    """model=local through Hydra: chat prompts, a boxed answer format, a stop string, truncated
    completions out of the loss; training, evaluation at the base model and the end, then the report."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["model=local", f"model.path={chat_dir}", "task.chat_template=true", "task.answer_format=boxed",
            "task.system_prompt=Reply in one line.", "task.levels=[1,2]", "task.train_per_level=4",
            "task.eval_per_level=2", "max_steps=2", "prompts_per_step=2", "sampler.group_size=4", "eval.n=2",
            "rollout.max_new_tokens=8", "rollout.stop=[STOP,END]", "algo.mask_truncated=true",
            "algo.lr=1e-6", f"hydra.run.dir={run}"]
    out = subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "done"
    groups, steps, ev = (read_table(run, t).to_pandas() for t in ("groups", "steps", "eval"))
    assert len(groups) == 4 and set(groups["group_size"]) == {4}
    assert steps["truncated"].tolist() == groups.groupby("step")["truncated"].sum().tolist()
    assert ((groups["truncated"] >= 0) & (groups["truncated"] <= 4)).all()
    assert set(ev["step"]) == {0, 2} and len(ev) == 2 * 4 * 2  # base model and last step, 4 prompts x 2
    assert (run / "checkpoints" / "step-000002" / "model.safetensors").exists()
    rep = subprocess.run([sys.executable, "-m", "analysis", str(run)], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=600)
    assert rep.returncode == 0, rep.stderr[-3000:]
    report = both_pages(run / "report" / "REPORT.md")
    assert "### First-round ties by difficulty" in report and "truncated" in report
    jobs = (run / "report" / "tables" / "jobs.csv").read_text().splitlines()
    header, row = jobs[0].split(","), jobs[1].split(",")
    assert int(row[header.index("truncated")]) == groups["truncated"].sum()
    assert re.search(r"Jobs: 1 loaded", report)
