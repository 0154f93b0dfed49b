"""The report's build as parts: each value the build makes (a section, or what sections share: the tests'
family, the budgets) declares the tables it reads and the other values it needs (`Part`); this orders them by
those needs and decides which go to the build's second process (`analysis.scheduler`). It knows no part by name:
`analysis/parts.py` declares them, `analysis/report.py` orders the page.

Where a part is made:
- here, in the order declared, each as soon as every value it needs is made: a part waiting for a value of the
  second process is passed over while another can be made, and the build waits only when none can;
- in the second process, where it declares how (`second`) and the runner allows it: a part that needs no other
  and reads only a small view of the tables (the eval rows, or a few columns of the groups), which is cheap to
  send. One that reads the eval rows begins while the groups load (`begin_early`), from the eval rows `load`
  reads first; kept where the jobs loaded in the end are the same, else begun again (`drop`). A claimable one
  (`CLAIMABLE`: made by whichever process claims it first) of the eval rows is then this process's unless the
  worker has begun it: the worker is busy with what it began first, and this one has the time while it waits.
  One `WITH_FIGURES` has its figures drawn there with it, moved into place when the build takes its value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from analysis import scheduler
from analysis.data.load import Tables
from analysis.sections.section import Context

WHOLE = "whole"  # the groups with the replayed rows (drawn and counted at an earlier step)
DRAWN = "drawn"  # the groups as drawn, replayed rows left out: what every section but one reads
EVAL = "eval"  # the eval rows only (no groups, no steps)

WITH_FIGURES = "with its figures"  # the second process makes it and draws its figures before it hands it back
CLAIMABLE = "claimable"  # made by whichever process claims it first (`scheduler.Helper.begin(..., claimable=True)`)


@dataclass(frozen=True)
class Part:
    """One value of the build: `make(tables, ctx, **needed)`, each value it `needs` passed by its name."""

    name: str
    make: Callable[..., Any]
    needs: tuple[str, ...] = ()  # other parts' values, or what the build hands in (`make_all`'s `given`)
    reads: str | tuple[str, ...] = DRAWN  # WHOLE, DRAWN, EVAL, or the groups' columns it reads (with the arm keys)
    second: str | None = None  # WITH_FIGURES or CLAIMABLE: how the second process may make it; None: here only


def check(parts: Sequence[Part], given: Iterable[str] = ()) -> None:
    """ValueError naming the first part that cannot be made as declared: a name given twice, a need nothing
    makes, needs that wait on each other, or a part for the second process that needs another or reads more than
    a small view."""
    names = [part.name for part in parts]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"parts named twice: {', '.join(twice)}")
    made = set(given)
    for part in parts:
        if unknown := [need for need in part.needs if need not in names and need not in made]:
            raise ValueError(f"part {part.name}: nothing makes {', '.join(unknown)}")
        if part.second is not None and (part.needs or part.reads in (WHOLE, DRAWN)):
            raise ValueError(f"part {part.name}: the second process makes only a part that needs no other and "
                             "reads the eval rows or a few columns of the groups")
    waiting = list(parts)
    while waiting:
        ready = [part for part in waiting if set(part.needs) <= made]
        if not ready:
            raise ValueError(f"parts waiting on each other: {', '.join(part.name for part in waiting)}")
        made |= {part.name for part in ready}
        waiting = [part for part in waiting if part not in ready]


def begin_early(parts: Sequence[Part], tables: Tables, ctx: Context) -> dict[str, scheduler.Later]:
    """The second process's parts that read the eval rows, begun from `tables` (the eval rows read first), while
    this process reads the groups."""
    return {part.name: _begin(part, _view(part, tables, tables, ctx), ctx) for part in parts
            if part.second is not None and part.reads == EVAL}


def drop(begun: Mapping[str, scheduler.Later]) -> None:
    """Parts begun early from other jobs than the build has in the end: the claimable ones claimed here, so the
    worker skips them (one it has begun runs to its end, unused)."""
    for later in begun.values():
        later.take()


def make_all(parts: Sequence[Part], whole: Tables, drawn: Tables, ctx: Context, given: Mapping[str, Any],
             begun: Mapping[str, scheduler.Later]) -> dict[str, Any]:
    """Every part's value by its name (with `given`, what the build hands in besides the tables): `whole` and
    `drawn` the tables with and without the replayed groups; `begun`: the parts `begin_early` began from the
    jobs the build has."""
    check(parts, given)
    later = {part.name: _second(part, _view(part, whole, drawn, ctx), ctx, begun.get(part.name))
             for part in parts if part.second is not None}
    values, by_name = dict(given), {part.name: part for part in parts}
    waiting = [part for part in parts if part.second is None]
    while waiting:
        for name in [name for name, value in later.items() if value.done()]:
            values[name] = _taken(by_name[name], later.pop(name))
        part = next((part for part in waiting if all(need in values for need in part.needs)), None)
        if part is None:  # every part left needs a value of the second process: the first one asked for, waited for
            name = next(need for part in waiting for need in part.needs if need in later)
            values[name] = _taken(by_name[name], later.pop(name))
            continue
        waiting.remove(part)
        values[part.name] = part.make(_view(part, whole, drawn, ctx), ctx,
                                      **{need: values[need] for need in part.needs})
    for name, value in later.items():  # those only the page shows
        values[name] = _taken(by_name[name], value)
    return values


def _view(part: Part, whole: Tables, drawn: Tables, ctx: Context) -> Tables:
    """The tables `part` reads: only a small view of them crosses to the second process."""
    if part.reads == WHOLE:
        return whole
    if part.reads == DRAWN:
        return drawn
    if part.reads == EVAL:
        return replace(drawn, groups=drawn.groups.iloc[:0], steps=drawn.steps.iloc[:0])
    columns = [c for c in dict.fromkeys([*part.reads, *ctx.arm]) if c in drawn.groups]
    return replace(drawn, groups=drawn.groups[columns], eval=drawn.eval.iloc[:0], steps=drawn.steps.iloc[:0])


def _begin(part: Part, tables: Tables, ctx: Context) -> scheduler.Later:
    """`part` begun in the second process (made here, when asked for, where there is none)."""
    if part.second == WITH_FIGURES:
        return scheduler.begin(part.make, tables, ctx, figures=files_of)
    return scheduler.begin(part.make, tables, ctx, claimable=True)


def _second(part: Part, tables: Tables, ctx: Context, begun: scheduler.Later | None) -> scheduler.Later:
    """A second-process part once the tables are loaded: the one begun early where there is one (a claimable
    one claimed here unless the worker has begun it), else begun now; a claimable one of the eval rows is made
    here (the worker is busy with what it began first)."""
    if begun is not None:
        begun.take()
        return begun
    if part.second == CLAIMABLE and part.reads == EVAL:
        return scheduler.Later(partial(part.make, tables, ctx))
    return _begin(part, tables, ctx)


def _taken(part: Part, later: scheduler.Later) -> Any:
    """The value of a second-process part, its figures moved into place where the worker drew them with it."""
    value = later()
    if part.second == WITH_FIGURES:
        scheduler.hand_over(files_of(value), of=later)
    return value


def files_of(value: Any) -> list:
    """The `Files` of a part's value: its own, or each of its items' where it is a tuple (None: no section)."""
    return [item.files for item in (value if isinstance(value, tuple) else (value,)) if item is not None]
