"""Math-set files: answers no reply could state (NaN in JSON, parquet or text, infinities, empty
once dressed, a fraction over zero) refused at file:line; two problems with one id refused naming both lines; the
held-out split by normalised problem text, so one problem under several ids or spellings never sits on both sides
(generated sets), with a warning counting the repeats; and an undefined answer never scored right."""

import json
import logging
import math
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import InputError
from grpo_lab.rewards.rules import RewardWeights, score
from grpo_lab.tasks.mathset import check_math_task, held_out_by_text, load_math_task, normalised, spelling

GOOD = {"problem": "What is $1+1$?", "answer": "2", "level": 1}


def jsonl(path, records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


@pytest.mark.parametrize("line,message", [
    ('{"problem": "p", "answer": NaN}', "field 'answer' is nan (not a finite number)"),
    ('{"problem": "p", "answer": Infinity}', "field 'answer' is inf (not a finite number)"),
    ('{"problem": "p", "answer": -Infinity}', "field 'answer' is -inf (not a finite number)"),
    ('{"problem": "p", "answer": 1e999}', "field 'answer' is inf (not a finite number)"),
    ('{"problem": NaN, "answer": "2"}', "field 'problem' is nan (not a finite number)"),
    ('{"problem": "p", "answer": "nan"}', "the answer 'nan' is not a defined finite number"),
    ('{"problem": "p", "answer": " NaN "}', "the answer ' NaN ' is not a defined finite number"),
    ('{"problem": "p", "answer": "-inf"}', "the answer '-inf' is not a defined finite number"),
    ('{"problem": "p", "answer": "\\\\text{NaN}"}', "is not a defined finite number"),
    ('{"problem": "p", "answer": "\\\\frac{0}{0}"}', "is not a defined finite number"),
    ('{"problem": "p", "answer": "1/0"}', "is not a defined finite number"),
    ('{"problem": "p", "solution": "so \\\\boxed{nan}"}', "the answer 'nan' is not a defined finite number"),
    ('{"problem": "p", "answer": "$ $"}', "the answer '$ $' is empty once its dress"),
    ('{"problem": "p", "answer": "\\\\boxed{}"}', "is empty once its dress"),
    ('{"problem": "p", "answer": "\\\\text{ }"}', "is empty once its dress"),
])
def test_an_answer_no_reply_could_state_is_refused_at_file_line(tmp_path, line, message):
    bad = jsonl(tmp_path / "bad.jsonl", [GOOD, GOOD | {"problem": "q"}, line])
    with pytest.raises(InputError) as caught:
        load_math_task(bad)
    assert str(caught.value).startswith(f"{bad}:3: ") and message in str(caught.value), str(caught.value)
    cfg = TrainConfig()
    cfg.task.name, cfg.task.path = "mathset", bad
    with pytest.raises(InputError, match="bad.jsonl:3: "):  # the config check reads it before any model loads
        validate(cfg)


def test_parquet_nan_is_refused_at_its_row(tmp_path):
    path = tmp_path / "math.parquet"
    pq.write_table(pa.table({"problem": ["a", "b", "c"], "answer": [1.0, math.nan, 3.0]}), path)
    with pytest.raises(InputError, match=r"math.parquet: row 1: field 'answer' is nan \(not a finite number\)"):
        load_math_task(str(path))


def test_two_problems_with_one_id_are_refused_naming_both_lines(tmp_path):
    path = jsonl(tmp_path / "ids.jsonl", [GOOD | {"id": "a"}, GOOD | {"id": "b", "problem": "x"},
                                           GOOD | {"id": "a", "problem": "y"}])
    with pytest.raises(InputError) as caught:
        load_math_task(path)
    assert str(caught.value) == f"{path}:3: id 'a' is also the id of {path}:1: two problems with one id"
    unique = jsonl(tmp_path / "unique.jsonl", [GOOD | {"unique_id": "u"}, GOOD | {"problem": "x", "unique_id": "u"}])
    with pytest.raises(InputError, match="unique.jsonl:2: id 'u' is also the id of .*unique.jsonl:1"):
        check_math_task(unique)
    train = jsonl(tmp_path / "train.jsonl", [GOOD | {"id": "t1"}, GOOD | {"id": "t2", "problem": "x"}])
    held = jsonl(tmp_path / "held.jsonl", [GOOD | {"id": "h1", "problem": "z"}, GOOD | {"id": "t2", "problem": "w"}])
    message = f"{held}:2: id 't2' is also the id of the training problem at {train}:2"
    for check in (lambda: load_math_task(train, held), lambda: check_math_task(train, held)):
        with pytest.raises(InputError) as caught:
            check()
        assert str(caught.value).startswith(message)


texts = st.lists(st.text(alphabet="abcxyz+-=?$ 0123456789", min_size=1, max_size=12).filter(str.strip),
                 min_size=1, max_size=40, unique_by=normalised)


@settings(max_examples=60, deadline=None)
@given(texts=texts, copies=st.lists(st.integers(0, 39), max_size=60), spacing=st.booleans())
def test_one_problem_under_many_ids_is_on_one_side_of_the_split(tmp_path_factory, texts, copies, spacing):
    records = [{"problem": t, "answer": "1", "id": f"a{i}"} for i, t in enumerate(texts)]
    for k, c in enumerate(copies):  # the same problem again under another id, spelled with other spaces or case
        t = texts[c % len(texts)]
        records.append({"problem": f"  {t.upper()} " if spacing else t, "answer": "1", "id": f"b{k}"})
    path = jsonl(tmp_path_factory.mktemp("split") / "set.jsonl", records)
    try:
        task = load_math_task(path)
    except ValueError as e:  # every problem fell on the held-out side: no training pool
        assert "empty training pool" in str(e)
        return
    train, held = ({normalised(p.prompt.split("\n")[0]) for p in pool} for pool in (task.train, task.held_out))
    assert not train & held
    assert len(task.train) + len(task.held_out) == len(records)
    assert check_math_task(path) == (len(task.train), len(task.held_out))  # what validate counts before loading


def test_a_problem_under_five_ids_never_leaks_into_the_held_out_pool(tmp_path, caplog):
    """As the issue's probe: 150 problems, each written under five ids. Split by a hash of the id (as before), most
    problems would sit on both sides; split by text, none does, and a warning says how many repeat."""
    records = [{"problem": f"Compute {i} * 7.", "answer": str(7 * i), "id": f"{i}-{k}"} for i in range(150)
               for k in range(5)]
    by_id = [{zlib.crc32(r["id"].encode()) % 1000 < 200 for r in records[5 * i:5 * i + 5]} for i in range(150)]
    assert sum(sides == {True, False} for sides in by_id) > 75  # the old split: most problems on both sides
    path = jsonl(tmp_path / "probe.jsonl", records)
    with caplog.at_level(logging.WARNING, logger="grpo_lab.tasks.mathset"):
        task = load_math_task(path)
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.held_out} and task.held_out
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 600 problems repeat the text of another (150 distinct texts); each text stays on one side of the "
        "held-out split"]


def test_a_held_out_file_takes_its_problems_out_of_training(tmp_path, caplog):
    train = jsonl(tmp_path / "train.jsonl", [{"problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(10)])
    held = jsonl(tmp_path / "held.jsonl", [{"problem": "what is 3+1?", "answer": "4", "id": "h"}])
    with caplog.at_level(logging.WARNING, logger="grpo_lab.tasks.mathset"):
        task = load_math_task(train, held)
    assert len(task.train) == 9 and "What is 3+1?" not in " ".join(p.prompt for p in task.train)
    assert "1 training problems have the text of a held-out problem" in caplog.text
    assert check_math_task(train, held) == (9, 1)


@pytest.mark.parametrize("given,expected", [
    ({"id": 0}, "0"), ({"id": "0"}, "0"), ({"unique_id": 0, "id": "x"}, "0"), ({"id": 0.5}, "0.5"),
    ({"id": None}, "ids-1"), ({}, "ids-1"),  # absent or null: the file's name and the record's index
])
def test_a_falsy_id_is_an_id(tmp_path, given, expected):
    """Issue 56: `"id": 0` silently became the line's index (a falsy value taken for no id). 0 is an id; only an
    absent or null id falls back to the file's name and the record's index."""
    path = jsonl(tmp_path / "ids.jsonl", [GOOD | {"id": "first"}, GOOD | {"problem": "q"} | given])
    task = load_math_task(path)
    assert [p.prompt_id for p in (*task.train, *task.held_out) if p.prompt.startswith("q")] == [expected]


@pytest.mark.parametrize("given,message", [
    ({"id": ""}, "field 'id' is empty"), ({"unique_id": "", "id": "x"}, "field 'unique_id' is empty"),
    ({"id": " "}, "field 'id' is empty"), ({"id": False}, "field 'id' must be text or a number, not bool"),
    ({"id": True}, "field 'id' must be text or a number, not bool"),
    ({"id": [1]}, "field 'id' must be text or a number, not list"),
])
def test_an_id_that_is_no_id_is_refused_at_file_line(tmp_path, given, message):
    path = jsonl(tmp_path / "ids.jsonl", [GOOD | {"id": "first"}, GOOD | {"problem": "q"} | given])
    for check in (lambda: load_math_task(path), lambda: check_math_task(path)):
        with pytest.raises(InputError) as caught:
            check()
        assert str(caught.value) == f"{path}:2: {message}"


def test_an_id_0_and_an_id_of_its_text_are_one_id(tmp_path):
    path = jsonl(tmp_path / "ids.jsonl", [GOOD | {"id": 0}, GOOD | {"problem": "q", "id": "0"}])
    with pytest.raises(InputError, match=r"ids.jsonl:2: id '0' is also the id of .*ids.jsonl:1"):
        load_math_task(path)


def test_problems_that_differ_only_in_spacing_never_sit_on_both_sides(tmp_path, caplog):
    """Issue 56: "4+7" and "4 + 7" were two texts to the split, so one problem could be trained on and held out. One
    normalised text now (spaces beside a sign dropped), on the side of its first spelling's hash: a file without
    such repeats splits as before; the repeat warning and the counts before loading agree."""
    records = [{"problem": f"What is {i}+7?", "answer": str(i + 7), "id": f"a{i}"} for i in range(200)]
    records += [{"problem": f"What is {i} + 7 ?", "answer": str(i + 7), "id": f"b{i}"} for i in range(200)]
    old = [held_out_by_text(spelling(r["problem"])) for r in records]
    assert sum(old[i] != old[200 + i] for i in range(200)) > 40  # spelling alone: many on both sides
    path = jsonl(tmp_path / "spaced.jsonl", records)
    with caplog.at_level(logging.WARNING, logger="grpo_lab.tasks.mathset"):
        task = load_math_task(path)
    train, held = ({normalised(p.prompt.split("\n")[0]) for p in pool} for pool in (task.train, task.held_out))
    assert held and not train & held and len(train | held) == 200
    assert {p.prompt_id for p in task.held_out} == {f"{x}{i}" for i in range(200) if old[i] for x in "ab"}
    assert check_math_task(path) == (len(task.train), len(task.held_out))
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 200 problems repeat the text of another (200 distinct texts); each text stays on one side of the "
        "held-out split"]
    alone = jsonl(tmp_path / "alone.jsonl", records[:200])  # no repeats: each problem where its own hash puts it
    assert {p.prompt_id for p in load_math_task(alone).held_out} == {f"a{i}" for i in range(200) if old[i]}


def test_a_held_out_file_takes_its_problems_out_of_training_whatever_their_spacing(tmp_path, caplog):
    train = jsonl(tmp_path / "train.jsonl", [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(10)]
                  + [{"problem": "What is 3+1 ?", "answer": "4"}])  # the held-out problem twice, spaced two ways
    held = jsonl(tmp_path / "held.jsonl", [{"problem": "what is 3+1?", "answer": "4", "id": "h"}])
    with caplog.at_level(logging.WARNING, logger="grpo_lab.tasks.mathset"):
        task = load_math_task(train, held)
    assert len(task.train) == 9 and not any("3 + 1" in p.prompt or "3+1" in p.prompt for p in task.train)
    assert "2 training problems have the text of a held-out problem" in caplog.text
    assert "train.jsonl: 1 problems repeat the text of another" in caplog.text
    assert check_math_task(train, held) == (9, 1)


UNDEFINED = ["nan", "NaN", "-nan", "\\text{nan}", "\\mathrm{NaN}", "n a n", "\\frac{0}{0}", "0/0", "\\dfrac{1}{0}",
             "1/0"]


@settings(max_examples=40, deadline=None)
@given(gold=st.one_of(st.integers(-10**6, 10**6).map(str), st.sampled_from(
    ["\\frac{1}{2}", "\\infty", "x", "nan", "NaN", "\\frac{0}{0}", "0/0", "1/0", "\\sqrt{2}", "n a n"])),
       answer=st.sampled_from(UNDEFINED), dress=st.sampled_from(["{}", "${}$", "\\textbf{{{}}}", "{} "]))
def test_an_undefined_answer_never_scores_right(gold, answer, dress):
    reply = f"The answer is $\\boxed{{{dress.format(answer)}}}$."
    assert not score(reply, True, gold, "latex", RewardWeights()).correct
    assert not score(f"\\boxed{{{gold}}}", True, answer, "latex", RewardWeights()).correct  # an undefined gold
    assert not score(reply, True, gold, "integer", RewardWeights(), "boxed").correct
