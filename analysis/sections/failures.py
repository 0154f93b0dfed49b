"""Lines the Findings say when a model could not learn: the arms that trained nothing (every group tied, every
advantage 0), and all-wrong ties that were mostly format failures (no sample gave an answer the task could read),
with whether they fell away with training."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.arms import iter_arms, short_label

FORMAT_SHARE = 0.5  # all-wrong ties without an answer at least this share: format failures dominate


def answered_text(split: pd.DataFrame | None, arm: Sequence[str]) -> str | None:
    """Where all-wrong ties were mostly format failures (no sample answered), per arm, and whether they fell away
    with training; None where no arm's were, or the runs did not record answers."""
    if split is None or split.empty:
        return None
    overall = split[split["difficulty"] == "all"]
    parts = []
    for label, rows in iter_arms(overall, list(arm)) if arm else [("", overall)]:
        phase = {p: r.iloc[0] for p, r in rows.groupby("phase")}
        every, first, last = phase.get("all"), phase.get("first"), phase.get("last")
        if every is None or first is None or first["unanswered_share"] < FORMAT_SHARE:
            continue
        name = f"{short_label(label)}: " if label else ""
        text = (f"{name}{first['unanswered_share']:.0%} of the {int(first['all_wrong']):,} all-wrong first-round ties "
                f"of each job's first steps{_steps(first)} had no sample that gave an answer the task could read")
        if last is not None:
            fell = last["unanswered_share"] < first["unanswered_share"] / 2
            text += (f", {last['unanswered_share']:.0%} of {int(last['all_wrong']):,} in its own last "
                     f"steps{_steps(last)}"
                     + (" (the model learned the answer format before the task)" if fell else ""))
        parts.append(text)
    if not parts:
        return None
    return ("**Format failures** among all-wrong ties (a format failure needs a looser answer format, shots or a "
            "format reward, not easier problems): " + "; ".join(parts) + ".")


def _steps(row: pd.Series) -> str:
    """The steps a phase's row covers (`ties.all_wrong_split`'s `steps`), in parentheses; "" where not given."""
    return f" (steps {row['steps']})" if "steps" in row and pd.notna(row["steps"]) else ""


def nothing_trained(groups: pd.DataFrame, arm: Sequence[str]) -> list[str]:
    """One line per arm whose every drawn group tied and whose update saw no nonzero advantage: it trained
    nothing, over which steps, and how many of its all-wrong ties had no sample with an answer (why, where answers
    were recorded), each count over the arm's drawn groups, redraws included, as the line says."""
    if groups.empty or "n_informative" not in groups:
        return []
    lines = []
    arms = list(iter_arms(groups, list(arm))) if arm else [("", groups)]
    for label, rows in arms:
        if not rows["tie"].all() or rows["n_informative"].sum() > 0:
            continue
        wrong = int((rows["tie_kind"] == "all_wrong").sum())
        where = f" in {short_label(label)}" if len(arms) > 1 else ""
        lines.append(f"**Nothing trained{where}**: {len(rows):,} of {len(rows):,} groups drawn in "
                     f"{_span(rows['step'])} tied (all-wrong: {wrong:,}{_unanswered(rows)}); every advantage was 0, "
                     "so the held-out scores are the base model's (see the warning in the run's log, and the example "
                     "completions on the second page).")
    return lines


def _span(steps: pd.Series) -> str:
    """The first and last step of `steps`: "steps 1–4", or "step 3" where they are one."""
    first, last = int(steps.min()), int(steps.max())
    return f"step {first}" if first == last else f"steps {first}–{last}"


def _unanswered(rows: pd.DataFrame) -> str:
    """Of `rows`' all-wrong ties, those in which no sample gave an answer, counted over the same groups:
    ", 118 of the 128 (92%) without an answer"; "" where the runs did not record answers."""
    if "n_answered" not in rows:
        return ""
    wrong = rows[(rows["tie_kind"] == "all_wrong").to_numpy() & rows["n_answered"].notna().to_numpy()]
    if wrong.empty:
        return ""
    none = int((wrong["n_answered"] == 0).sum())
    return f", {none:,} of the {len(wrong):,} ({none / len(wrong):.0%}) without an answer"
