"""Transfer: each ordering of two arms that a reference study resolved (the tiny model's tie_learning, say),
read in this study (`analysis/measures/transfer.py`), in a table and one Findings line a measure."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.data.arms import short_label
from analysis.measures.transfer import MEASURES, orderings
from analysis.render.markdown import cell
from analysis.render.writer import Files
from analysis.sections.section import Section
from analysis.stats.seeds import ALPHA


@dataclass(frozen=True, kw_only=True)
class Transfer(Section):
    """`sentences`: one Findings line per measure both studies compared."""

    sentences: list[str]


def section(reference: pd.DataFrame, name: str, tests: pd.DataFrame) -> Transfer:
    """The section from the reference's tests table (`read_reference`), the name it was given by (as configured:
    the page quotes it) and this study's tests' family; where the two share no pair of arms, a line saying so."""
    table = orderings(reference, tests)
    if table.empty:
        return Transfer(text=f"## Transfer from `{name}`\n\nNo pair of arms of this study was compared in `{name}` on "
                        "held-out pass@1 (the arms are matched by their labels: the same keys and values).",
                        sentences=[])
    floor = table["smallest_p_holm"].min()
    shown = table.assign(a=table["a"].map(short_label), b=table["b"].map(short_label))
    files = Files()
    text = "\n".join([
        f"## Transfer from `{name}`", "",
        f"Every pair of arms that `{name}` (its `tables/tests.csv`) also compared, on held-out pass@1 at equal updates "
        "(each study at its own equal-updates point) and at the end of the budget (equal samples; the two studies' "
        "budgets need not be equal), as b − a. `there` and `here` are each study's verdict by this report's rule: "
        "its interval over seeds excludes zero and the exact test across paired seeds rejects after "
        f"Holm's correction (α = {ALPHA}); `none`: no ordering. `verdict`: **reproduced** or **reversed** where both "
        "order the pair, **unresolved** where only the reference does (`leans`: the way this study's estimate "
        "points, with `b_higher` of the paired seeds above; `interval_only`: its interval alone excludes zero, but "
        "not its test; `smallest_p_holm`: the smallest p its test could give after Holm's correction), `none there` "
        "where the reference left the pair unordered (`new here` if this study orders it). The difference, interval "
        "and p are this study's. " + floor_text(floor), "",
        files.table("transfer", shown),
    ])
    sentences = [line for measure in MEASURES if (line := sentence(table, measure, name))]
    if missing := unaligned(reference, tests, name):
        text += f"\n\n{missing}"
        sentences.append(missing)
    return Transfer(text=text, files=files, sentences=sentences)


def unaligned(reference: pd.DataFrame, tests: pd.DataFrame, name: str) -> str | None:
    """Where the reference compared its arms at equal updates and this study has no such checkpoint, one line
    saying that half of the transfer cannot be read here; None otherwise."""
    at_updates = MEASURES[0]
    if not (reference["metric"] == at_updates).any() or (tests["metric"] == at_updates).any():
        return None
    return (f"`{name}`'s orderings at equal updates cannot be read here: this study has no checkpoint at equal "
            "updates (no number of updates every job was evaluated at: its jobs took different updates at every "
            "shared checkpoint, e.g. where loop steps skipped their update; `eval.every_updates` gives every job "
            "one), so only its orderings at the end of the budget are compared.")


def sentence(table: pd.DataFrame, measure: str, name: str) -> str | None:
    """One Findings line: of the reference's orderings on `measure`, how many are reproduced, reversed and
    unresolved here, each named."""
    rows = table[table["metric"] == measure]
    ordered = rows[rows["there"] != "none"]
    if ordered.empty:
        return None

    def pair(r: pd.Series) -> str:
        a, b = short_label(r["a"]), short_label(r["b"])
        best, worst = (b, a) if r["there"] == "b > a" else (a, b)
        return f"{best} > {worst}"

    parts = []
    for verdict in ("reproduced", "reversed", "unresolved"):
        those = ordered[ordered["verdict"] == verdict]
        if those.empty:
            continue
        listed = []
        for _, r in those.iterrows():
            text = pair(r) + (" there" if verdict == "reversed" else "")
            if verdict == "unresolved":
                way = "no way" if r["leans"] == "none" else "the same way" if r["leans"] == r["there"] else \
                    "the other way"
                text += (f" (leans {way}: {cell(_signed(r), 3)} "
                         f"[{cell(_signed(r, 'low'), 3)}, {cell(_signed(r, 'high'), 3)}]"
                         f"{', interval only' if r['interval_only'] else ''})")
            listed.append(text)
        parts.append(f"{verdict} {len(those)} ({'; '.join(listed)})")
    unordered = int((rows["there"] == "none").sum())
    new = rows[rows["verdict"] == "new here"]
    tail = f" {unordered} pair{'s' if unordered != 1 else ''} `{name}` left unordered" + (
        f", of which this study orders {len(new)}" if len(new) else "") + "." if unordered else ""
    numbers = " (better − worse there, with this study's 95% interval over seeds)" \
        if (ordered["verdict"] == "unresolved").any() else ""
    floor = rows["smallest_p_holm"].min()
    cannot = f" {floor_text(floor)}" if pd.notna(floor) and floor >= ALPHA else ""
    return (f"Transfer from `{name}`, {measure}: of its {len(ordered)} resolved ordering"
            f"{'s' if len(ordered) != 1 else ''} among these arms, " + ", ".join(parts) + numbers + "." + tail
            + cannot)


def floor_text(floor: float) -> str:
    """What the seeds can resolve here: the smallest p after Holm's correction against alpha."""
    if pd.isna(floor):
        return ""
    text = f"With these seeds and pairs the smallest p a pair can reach after Holm's correction is {cell(floor, 3)}"
    return text + (f", at or above α = {ALPHA}: no ordering can be resolved here, however large the difference."
                   if floor >= ALPHA else ".")


def _signed(row: pd.Series, end: str = "") -> float:
    """This study's difference (or an interval end) as the reference's better arm minus its worse."""
    flip = row["there"] == "a > b"
    if not end:
        return -row["difference"] if flip else row["difference"]
    low, high = row["ci_low"], row["ci_high"]
    if flip:
        low, high = -high, -low
    return low if end == "low" else high
