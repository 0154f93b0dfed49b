"""The report's parts (analysis/runner.py, analysis/parts.py): each is made once every value it needs is, from the
view of the tables it declares; a declaration that cannot be made is refused in one line naming the part; the
scheduler and the runner name no part, and the report's own parts are all makeable."""

import re
from pathlib import Path

import pandas as pd
import pytest

from analysis import parts, report
from analysis.data.load import Tables
from analysis.runner import CLAIMABLE, DRAWN, EVAL, WHOLE, WITH_FIGURES, Part, check, make_all
from analysis.sections.section import Context

ROOT = Path(__file__).resolve().parent.parent


def _tables(groups: int) -> Tables:
    frame = pd.DataFrame({"job": ["0"] * groups, "step": range(groups), "arm": ["a"] * groups,
                          "tie": [True] * groups})
    return Tables(root=Path("."), jobs=pd.DataFrame({"job": ["0"]}), groups=frame, steps=frame.iloc[:1],
                  eval=frame.iloc[:2])


def _sizes(tables, ctx, **needed):
    """What a part saw: its tables' sizes and columns, and the values it was handed."""
    return (len(tables.groups), len(tables.eval), len(tables.steps), tuple(tables.groups.columns), needed)


def test_each_part_is_made_after_what_it_needs_from_the_view_it_declares():
    made = []

    def logged(name):
        def make(tables, ctx, **needed):
            made.append(name)
            return _sizes(tables, ctx, **needed)
        return make

    declared = (
        Part("last", logged("last"), needs=("middle", "given")),  # declared first, made last
        Part("middle", logged("middle"), needs=("first",), reads=WHOLE),
        Part("first", logged("first")),
        Part("eval", _sizes, reads=EVAL, second=CLAIMABLE),
        Part("columns", _sizes, reads=("tie",), second=CLAIMABLE),  # with the arm keys, no other rows
    )
    ctx = Context(root=Path("."), out=Path("."), arm=("arm",), names={})
    values = make_all(declared, _tables(5), _tables(3), ctx, {"given": 7}, {})
    assert made == ["first", "middle", "last"]
    assert values["first"] == (3, 2, 1, ("job", "step", "arm", "tie"), {})
    assert values["middle"][0] == 5 and values["middle"][4] == {"first": values["first"]}
    assert values["last"][4] == {"middle": values["middle"], "given": 7}
    assert values["eval"][:3] == (0, 2, 0)
    assert values["columns"][:4] == (3, 0, 0, ("tie", "arm"))


@pytest.mark.parametrize("declared,refusal", [
    ((Part("a", _sizes), Part("a", _sizes)), "parts named twice: a"),
    ((Part("a", _sizes, needs=("b",)),), "part a: nothing makes b"),
    ((Part("a", _sizes, needs=("b",)), Part("b", _sizes, needs=("a",))), "parts waiting on each other: a, b"),
    ((Part("b", _sizes), Part("a", _sizes, needs=("b",), reads=EVAL, second=CLAIMABLE)),
     "part a: the second process makes only a part that needs no other"),
    ((Part("a", _sizes, reads=DRAWN, second=WITH_FIGURES),), "part a: the second process makes only"),
])
def test_a_part_that_cannot_be_made_is_refused_by_name(declared, refusal):
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}"):
        check(declared)


def test_the_report_s_parts_are_makeable_and_every_named_page_entry_is_one():
    check(parts.PARTS, parts.GIVEN)
    named = {name for name, make in (*report.PAGE, *report.DETAILS_PAGE) if make is None}
    assert named <= {part.name for part in parts.PARTS}


def test_the_scheduler_and_the_runner_name_no_part():
    names = {part.name for part in parts.PARTS} | {name for name, _ in (*report.PAGE, *report.DETAILS_PAGE)}
    for module in ("scheduler", "runner"):
        code = (ROOT / "analysis" / f"{module}.py").read_text()
        named = {name for name in names if re.search(rf"[\"'`]{name}[\"'`]|\bsections\.{name}\b", code)}
        assert not named, (module, named)
