"""`task=gym`: any reasoning-gym generator (PyPI `reasoning-gym`, 106 procedural generators with difficulty knobs
and their own `score_answer`), with difficulty levels made of the generator's own config keys.

A level is one setting of the generator: `task.gym.levels` lists them, each a dict of the generator's keys
(chain_sum's `{min_terms: 3, max_terms: 3, min_digits: 2, max_digits: 2}`), over `task.gym.config`'s keys that
every level shares. Each level draws its training problems from the generator seeded by (task.seed, level), and
its held-out problems from another seed, skipping any question the training pool holds (a problem's id is a hash
of its question: the two pools are disjoint by construction, and Task checks it).

The reward is the generator's own check, `score_answer`, given the *one* final answer our extraction reads
(grpo_lab/rewards/rules.py `stated_answer`: the task's answer format, every other final-answer statement agreeing),
never the whole reply: gsm_symbolic's check reads the first number of whatever it is given, so "12 or 13" would
be 12. Where the generator's answer is a number, the stated answer must be one number, whole. A check that
returns 1.0 is right; anything less (the generators' partial credit, 0.01 for a wrong number) is wrong, keeping
the reward binary. Some checks parse with sympy, whose parser evaluates Python: an answer with a character
outside SAFE_ANSWER (no brackets, quotes, "_", "\\", "**" or "^") is wrong without being checked, so model text
never reaches an evaluator that can call anything, or build a tower of powers.

reasoning-gym is imported only when a gym task is built (`pip install -e '.[gym]'`)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import zlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from grpo_lab.errors import ConfigError, require
from grpo_lab.records import Problem, Task
from grpo_lab.rewards.numbers import last_number, number_alone
from grpo_lab.tasks.base import TaskKind, check_levelled, shots_text

# the keys only this task reads (with task=arithmetic, which reads the pool sizes, seed and format too)
KEYS = ("task.train_per_level", "task.eval_per_level", "task.seed", "task.answer_format")
OURS = ("seed", "size")  # generator keys the task sets itself: the pools' seeds and sizes
# How the prompt asks for the answer in each format (rewards.final_answer reads it there)
INSTRUCTIONS: dict[str, str] = {
    "bare": "",
    "number": " Reply with only the final answer.",
    "boxed": " Put the final answer in \\boxed{}.",
    "answer_line": ' End your reply with a last line "Answer: X", X the final answer.',
    "last_number": "",  # answered in the model's own words; the last number is read
}
# How a worked example (task.gym.shots) states its answer in each format
STATEMENTS: dict[str, str] = {
    "bare": "{answer}", "number": "{answer}", "boxed": "The answer is \\boxed{{{answer}}}.",
    "answer_line": "Answer: {answer}", "last_number": "The answer is {answer}.",
}
SAFE_ANSWER = re.compile(r"[0-9A-Za-z .,:;=%+\-*/]*")
MAX_DRAWS = 50  # draws per problem wanted before a level is declared too small for its pool
_FINAL = re.compile(r"\n?#### *(\S+)\s*$")  # gsm_symbolic's worked answers end in "#### N"


@dataclass
class GymConfig:
    """`task.gym`: which reasoning-gym generator, and its difficulty levels."""

    generator: str = "chain_sum"  # a reasoning-gym dataset name (reasoning_gym.factory.DATASETS)
    config: dict[str, Any] = field(default_factory=dict)  # the generator's keys every level shares
    # each level a dict of the generator's keys (one setting); level k is the k-th, labelled "k"
    levels: list[dict[str, Any]] = field(default_factory=lambda: [
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2},
        {"min_terms": 3, "max_terms": 3, "min_digits": 2, "max_digits": 2},
        {"min_terms": 4, "max_terms": 4, "min_digits": 3, "max_digits": 3},
    ])
    template: str = "{question}{instruction}"  # the prompt: {question} the generator's, {instruction} the format's
    shots: int = 0  # worked examples from the generator's answer_cot: chat turns, or plain text for a base model


def _gym():
    try:
        import reasoning_gym
    except ImportError as e:
        raise ConfigError("task=gym needs reasoning-gym: pip install -e '.[gym]'") from e
    return reasoning_gym


def gym_version() -> str:
    return metadata.version("reasoning-gym")


def level_config(gym: GymConfig, level: int) -> dict[str, Any]:
    """The generator's keys at level `level` (1-based): the shared ones, then the level's own."""
    return {**gym.config, **gym.levels[level - 1]}


def level_label(gym: GymConfig, level: int) -> str:
    return ", ".join(f"{k}={v}" for k, v in gym.levels[level - 1].items()) or "the generator's defaults"


def _seed(seed: int, level: int, side: str) -> int:
    return zlib.crc32(f"gym-{seed}-{level}-{side}".encode())  # a 32-bit seed of its own for each pool


def check_gym(cfg) -> None:
    """The generator exists, every level's keys are its config's and valid, the template and shots can work."""
    t, gym = cfg.task, cfg.task.gym
    factory = _gym().factory
    require(gym.generator in factory.DATASETS, "task.gym.generator", gym.generator,
            f"is not a reasoning-gym generator (one of {len(factory.DATASETS)}, e.g. chain_sum, gsm_symbolic)")
    require(bool(gym.levels), "task.gym.levels", gym.levels, "name at least one level (a dict of the generator's keys)")
    fields = {f.name for f in dataclasses.fields(factory.DATASETS[gym.generator][1])}
    for key, where in [*((k, "task.gym.config") for k in gym.config),
                       *((k, f"task.gym.levels[{i}]") for i, lv in enumerate(gym.levels) for k in lv)]:
        require(key not in OURS, where, key, "is set by the task (task.seed, task.train_per_level)")
        require(key in fields, where, key, f"is not a key of {gym.generator}'s config ({', '.join(sorted(fields))})")
    for level in range(1, len(gym.levels) + 1):
        try:
            sample = factory.create_dataset(gym.generator, **level_config(gym, level), seed=0, size=8)
            answers = [str(sample[i]["answer"]) for i in range(len(sample))]
        except (AssertionError, ValueError, TypeError) as e:
            raise ConfigError(f"task.gym.levels[{level - 1}]={gym.levels[level - 1]} is invalid for "
                              f"{gym.generator}: {e or type(e).__name__}") from None
        words = [a for a in answers if not number_alone(a)]
        require(t.answer_format != "last_number" or not words, "task.answer_format", t.answer_format,
                f"reads a number, but {gym.generator}'s answers are not all numbers (e.g. "
                f"{(words or [''])[0][:40]!r}): use boxed or answer_line")
    require("{question}" in gym.template, "task.gym.template", gym.template, "must contain {question}")
    try:
        gym.template.format(question="", instruction="")
    except (KeyError, IndexError, ValueError) as e:
        raise ConfigError(f"task.gym.template={gym.template!r} is invalid: only {{question}} and {{instruction}} "
                          f"may be filled ({e!r})") from None
    require(gym.shots >= 0, "task.gym.shots", gym.shots, "must be >= 0")
    require(not gym.shots or cfg.model.name == "hf", "task.gym.shots", gym.shots,
            "needs a model=hf tokenizer (model=smollm2, gemma3 or local)")
    require(not (gym.shots and t.shots), "task.gym.shots", gym.shots, "and task.shots both give shots: set one")
    if gym.shots:
        entry = factory.create_dataset(gym.generator, **level_config(gym, 1), seed=0, size=1)[0]
        require(_worked(entry) is not None, "task.gym.shots", gym.shots,
                f"{gym.generator} gives no worked answer (answer_cot) to show")


def _worked(entry: dict) -> str | None:
    return entry.get("answer_cot") or entry.get("metadata", {}).get("answer_cot")


def prompt_id(generator: str, level: int, question: str) -> str:
    return f"gym-{generator}-L{level}-{hashlib.sha1(question.encode()).hexdigest()[:12]}"


class GymGrader:
    """A gym task's check: the generator's `score_answer` on the one final answer read, against the entry the
    problem was made from. Called in the trainer's process (the checks are plain Python on a SAFE_ANSWER)."""

    def __init__(self, datasets: dict[int, Any], entries: dict[str, tuple[int, dict]]):
        self.datasets, self.entries = datasets, entries

    def __call__(self, answer: str | None, problem: Problem) -> bool:
        if answer is None or not SAFE_ANSWER.fullmatch(answer) or "**" in answer:
            return False
        level, entry = self.entries[problem.prompt_id]
        if last_number(str(entry["answer"]))[1] is not None and number_alone(str(entry["answer"])):
            if not number_alone(answer):  # a number's answer is one number, whole: "12 or 13" is not 12
                return False
        try:
            return self.datasets[level].score_answer(answer, entry) == 1.0
        except Exception:  # noqa: BLE001 - an answer the generator's check cannot read is wrong
            return False


def _draws(count: int) -> int:
    return count * MAX_DRAWS + 100  # the dataset's size: some generators lay out their whole index up front


def _dataset(factory, gym: GymConfig, level: int, seed: int, side: str, count: int):
    return factory.create_dataset(gym.generator, **level_config(gym, level), seed=_seed(seed, level, side),
                                  size=_draws(count))


def _draw(dataset, count: int, skip: set[str], key: str, level: int, generator: str) -> list[dict]:
    """`count` entries of distinct questions not in `skip`, in the dataset's order."""
    out: dict[str, dict] = {}
    for idx in range(len(dataset)):
        if len(out) == count:
            break
        entry = dataset[idx]
        if entry["question"] not in skip:
            out.setdefault(entry["question"], entry)
    if len(out) < count:
        raise ConfigError(f"{key}={count} is too large: level {level} of {generator} gave {len(out)} distinct "
                          f"new problems in {len(dataset)} draws")
    return list(out.values())


def build_gym(t) -> Task:
    """The task a TaskConfig with name gym describes (check_gym first)."""
    factory, gym = _gym().factory, t.gym
    instruction = INSTRUCTIONS[t.answer_format]
    datasets, entries, train, held_out, seen, sides = {}, {}, [], [], set(), []
    for level in range(1, len(gym.levels) + 1):
        datasets[level] = _dataset(factory, gym, level, t.seed, "train", t.train_per_level)
        drawn = _draw(datasets[level], t.train_per_level, seen, "task.train_per_level", level, gym.generator)
        seen |= {e["question"] for e in drawn}
        sides.append((level, drawn))
    for level, drawn in sides:  # every training question is known before any held-out one is drawn
        held = _dataset(factory, gym, level, t.seed, "held_out", t.eval_per_level)
        kept = _draw(held, t.eval_per_level, seen, "task.eval_per_level", level, gym.generator)
        seen |= {e["question"] for e in kept}  # no question twice, whichever levels draw it
        for pool, side in ((train, drawn), (held_out, kept)):
            for entry in side:
                pid = prompt_id(gym.generator, level, entry["question"])
                entries[pid] = (level, entry)
                pool.append(Problem(prompt_id=pid, prompt=gym.template.format(question=entry["question"],
                                                                                instruction=instruction),
                                    answer=str(entry["answer"]), difficulty=str(level)))
    return Task(name="gym", train=tuple(train), held_out=tuple(held_out), answer_kind="graded",
                difficulty_labels={str(lv): level_label(gym, lv) for lv in range(1, len(gym.levels) + 1)},
                answer_format=t.answer_format, grader=GymGrader(datasets, entries), shots=_shots(t, factory),
                source={"generator": gym.generator, "reasoning_gym": gym_version(), "config": dict(gym.config),
                        "levels": [dict(lv) for lv in gym.levels], "seed": t.seed})


def _shots(t, factory) -> tuple[tuple[str, str], ...]:
    """task.gym.shots worked examples of level 1, from a stream of their own, as (user, assistant) turns; a pool's
    problem asking a shot's question leaves it when the prompts are rendered (grpo_lab/tasks/chat.py)."""
    gym = t.gym
    if not gym.shots:
        return ()
    data = _dataset(factory, gym, 1, t.seed, "shots", gym.shots)
    out = []
    for entry in _draw(data, gym.shots, set(), "task.gym.shots", 1, gym.generator):
        steps = _FINAL.sub("", _worked(entry)).rstrip()
        stated = STATEMENTS[t.answer_format].format(answer=entry["answer"])
        out.append((gym.template.format(question=entry["question"], instruction=INSTRUCTIONS[t.answer_format]),
                    f"{steps}\n{stated}" if t.answer_format not in ("bare", "number") else stated))
    return tuple(out)


class Gym(TaskKind):
    """`task=gym`: a reasoning-gym generator, its levels settings of its own difficulty keys."""

    name = "gym"
    keys = KEYS
    settings_type = GymConfig

    @classmethod
    def check(cls, cfg) -> None:
        check_levelled(cfg)
        check_gym(cfg)

    @classmethod
    def sizes(cls, cfg) -> tuple[int, int]:
        t = cfg.task
        return len(t.gym.levels) * t.train_per_level, len(t.gym.levels) * t.eval_per_level

    @classmethod
    def no_held_out(cls, cfg) -> str:
        return "task.eval_per_level=0"

    @classmethod
    def build(cls, cfg) -> Task:
        return build_gym(cfg)

    @classmethod
    def easier(cls, cfg) -> str:
        return "easier problems (task.gym.levels: the generator's easier settings)"

    @classmethod
    def answer_help(cls, cfg) -> str:
        shots = shots_text(cfg, "task.shots or task.gym.shots", "worked examples")
        return shots if cfg.task.answer_format == "last_number" else f"task.answer_format=last_number or {shots}"
