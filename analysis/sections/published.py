"""Against a published study: a published table of arms (`analysis/published/*.yaml`) read beside this study
(`analysis/measures/published.py`): the answer in one short paragraph, then each of its arms beside its counterpart
here, then its settings beside this study's."""

from __future__ import annotations

import re

import pandas as pd

from analysis.data.arms import iter_arms
from analysis.data.load import Tables
from analysis.measures.published import (
    TOKENS,
    UPDATES,
    Published,
    counts,
    our_settings,
    rows,
    settings_table,
)
from analysis.render import markdown
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.sections.verdict import Verdict
from analysis.stats.seeds import ALPHA


def section(tables: Tables, ctx: Context, published: Published, tests: pd.DataFrame,
            verdict: Verdict | None) -> Section:
    """The section from the published table, this study's tests' family and its verdict (the alignments' names and
    points; None: named from the metrics alone)."""
    alignments = {a.metric: (a.name, a.point) for a in verdict.alignments} if verdict is not None else None
    arms = list(dict.fromkeys(label for label, _ in iter_arms(tables.jobs, ctx.arm))) if len(tables.jobs) else []
    table = rows(published, tests, alignments, arms)
    settings = settings_table(published, our_settings(tables.jobs, tables.steps, tables.eval, ctx.arm))
    files = Files()
    base = table[table["agrees"] == "baseline"]
    our_base = str(base["our_arm"].iloc[0]) if len(base) else published.arm(published.baseline).ours
    source = published.source
    cited = ", ".join(source[k] for k in ("author", "date") if k in source) + (
        f", round {source['round']}" if "round" in source else "")
    parts = [
        f"## Against a published study: {published.name}", "",
        answer(published, table, settings, our_base), "",
        f"Each of their arms ({published.measure}, as a difference from {published.baseline}; tokens"
        + (f": {published.tokens_measure}," if published.tokens_measure else "")
        + f" as a ratio of {published.baseline}'s) beside its counterpart here (held-out pass@1 as a difference from "
        f"{our_base}, [95% interval] over seeds; resolved: the interval excludes 0 and the exact test across seeds "
        f"rejects after Holm, α = {ALPHA}) at each alignment this study has. `agrees`: same or opposite sign where "
        "this study resolves its difference, else the way its estimate leans. Source: "
        f"[{cited or published.name}]({source['url']})"
        + (f", \"{source['comment']}\"" if "comment" in source else "") + f"; the file: `{published.path}`.", "",
        markdown.table(display(table)) + f"\n\nAs CSV: {files.csv('published', table)}", "",
        "Settings: theirs as published, this study's read from its runs.", "",
        files.table("published_settings", settings),
    ]
    return Section(text="\n".join(parts), files=files)


def answer(published: Published, table: pd.DataFrame, settings: pd.DataFrame, our_base: str | None) -> str:
    """The answer first, generated from the rows: at their alignment and at the other resource's, how many of the
    arms with a counterpart point their way and how many the other, and how many of those this study resolves; that
    theirs cannot be resolved; and the settings that set the two apart most (model, updates, batch)."""
    with_here = table[table["their_arm"].notna() & table["alignment"].notna()]
    mapped = with_here["their_arm"].nunique()
    compared = len(published.arms) - 1  # their baseline is no comparison
    here = list(dict.fromkeys(with_here["alignment"]))  # the alignments this study compared them at
    said = [a for a in (published.matches, *[a for a in (UPDATES, TOKENS) if a != published.matches][:1])
            if a in here] or here  # theirs and the other resource's; else every one this study has
    clauses = [f"this study has no comparison at {published.matches} (theirs)"] \
        if mapped and published.matches not in here else []
    for alignment in said:
        at = with_here[with_here["alignment"] == alignment]
        c = counts(table, alignment)
        point = at["point"].iloc[0]
        inner = "; ".join(x for x in ("their alignment" if alignment == published.matches else "",
                                      point if isinstance(point, str) else "") if x)
        resolved = c["same_resolved"] + c["other_resolved"]
        clauses.append(
            f"at {alignment}" + (f" ({inner})" if inner else "")
            + f" {c['same']} point{'s' * (c['same'] == 1)} their way"
            + (f", {c['other']} the other way and {c['no_lean']} neither" if c["no_lean"] else
               f" and {c['other']} the other way")
            + (", none resolved here" if not resolved else
               f", of which {c['same_resolved']} and {c['other_resolved']} resolved here"))
    theirs = table.loc[table["their_arm"].notna() & (table["agrees"] != "baseline"), "their_difference"]
    span = f" ({_signed(theirs.min())} to {_signed(theirs.max())})" if len(theirs) else ""
    why = ("one seed an arm: with no test, none of their differences" if published.seeds == 1 else
           f"{published.seeds} seeds an arm with no interval or test published: none of their differences")
    text = (f"**{mapped} of the {compared} arm{'s' * (compared != 1)} of {published.name} "
            f"{'has' if mapped == 1 else 'have'} a counterpart here**, each measured from {published.baseline} there "
            f"and {our_base} here" + (": " + "; ".join(clauses) if clauses else "") + ". "
            f"Theirs is {why}{span} can be resolved by this report's rule.")
    shown = settings.set_index("setting")
    def short(text: str) -> str:  # a setting without its asides: the table has them
        return re.sub(r" \([^)]*\)", "", text)

    differ = [f"{short(shown.loc[name, 'theirs'])} there against {short(shown.loc[name, 'here'])} here"
              for name in ("model", "updates (optimizer steps)", "prompts x samples a step")
              if name in shown.index and "–" not in (shown.loc[name, "theirs"], shown.loc[name, "here"])]
    if differ:
        text += " Settings (last table): " + "; ".join(differ) + "."
    return text


def _signed(value: object) -> str:
    return "–" if pd.isna(value) else f"{float(value):+.3f}"


def display(table: pd.DataFrame) -> pd.DataFrame:
    """The rows as the page shows them: differences signed, the interval in one cell, the alignment with its
    point."""
    def at(row: pd.Series) -> str:
        if pd.isna(row["alignment"]):
            return "–"
        return f"{row['alignment']}" + (f" ({row['point']})" if isinstance(row["point"], str) and row["point"] else "")

    # an arm's published figures and note once, on its first row
    again = table["their_arm"].notna() & table["their_arm"].eq(table["their_arm"].shift())
    return pd.DataFrame({
        "theirs": table["their_arm"].fillna("–"), "ours": table["our_arm"].replace("", "–"),
        "their difference": table["their_difference"].map(_signed),
        "their tokens (x baseline)": table["their_tokens_ratio"].map(lambda v: "–" if pd.isna(v) else f"{v:.2f}")
        .mask(again, ""),
        "theirs resolved": table["their_resolved"].fillna("–").mask(again, ""),
        "at": table.apply(at, axis=1) if len(table) else [],
        "difference here": table["difference"].map(_signed),
        "95% interval": [("–" if pd.isna(lo) or pd.isna(hi) else f"[{lo:+.3f}, {hi:+.3f}]")
                         for lo, hi in zip(table["ci_low"], table["ci_high"])],
        "resolved here": table["resolved"].map(lambda v: "–" if pd.isna(v) else "yes" if v else "no"),
        "agrees": table["agrees"], "note": table["note"].fillna("").mask(again, ""),
    })

