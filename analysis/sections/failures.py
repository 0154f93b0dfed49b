"""Lines the Findings say when a model could not learn: the arms that trained nothing (every group tied, every
advantage 0), and all-wrong ties that were mostly format failures (no sample gave an answer the task could read),
with whether they fell away with training."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.arms import arm_label, iter_arms, short_label

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


def nothing_trained(groups: pd.DataFrame, arm: Sequence[str], split: pd.DataFrame | None) -> list[str]:
    """One line per arm whose every drawn group tied and whose update saw no nonzero advantage: it trained
    nothing, and its all-wrong ties' share without an answer says why (where answers were recorded)."""
    if groups.empty or "n_informative" not in groups:
        return []
    lines = []
    arms = list(iter_arms(groups, list(arm))) if arm else [("", groups)]
    for label, rows in arms:
        if not rows["tie"].all() or rows["n_informative"].sum() > 0:
            continue
        wrong = int((rows["tie_kind"] == "all_wrong").sum())
        why = ""
        if split is not None and len(split):
            mine = split[(split["difficulty"] == "all") & (split["phase"] == "all")]
            if arm:
                mine = mine[[arm_label({k: r[k] for k in arm}) == label for _, r in mine.iterrows()]]
            if len(mine):
                why = f", {mine['unanswered_share'].iloc[0]:.0%} without an answer"
        where = f" in {short_label(label)}" if len(arms) > 1 else ""
        lines.append(f"**Nothing trained{where}**: {len(rows):,} of {len(rows):,} groups tied (all-wrong: {wrong:,}"
                     f"{why}); every advantage was 0, so the held-out scores are the base model's (see the warning "
                     "in the run's log, and the example completions on the second page).")
    return lines
