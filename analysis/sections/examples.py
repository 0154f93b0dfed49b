"""Example completions for the report: a few whole groups per difficulty (a mixed group, an
all-correct tie, an all-wrong tie) from the completions table (`log_completions=N`), so a reader
sees what a tie looks like. Model output is untrusted text: shown in code spans, never run."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.data.labels import natural_sorted
from analysis.sections.section import Context, Section

KINDS = {"mixed": "Mixed group", "all_correct": "All-correct tie", "all_wrong": "All-wrong tie",
         "other": "Tie on a non-binary reward"}
MAX_CHARS = 60  # a completion longer than this is cut, with "…"


def section(completions: pd.DataFrame, ctx: Context) -> Section | None:
    """The examples section from the completions tables (`analysis.data.completions`); None without any."""
    if completions.empty:
        return None
    return Section(text="\n".join([
        "## Example completions", "",
        "Kept by `log_completions=N` (the first N completions of each step, whole groups): per difficulty the "
        "latest mixed group, all-correct tie and all-wrong tie, with every kept completion and its reward. "
        "Completions are untrusted model output, shown as code, cut at 60 characters.", "",
        examples_markdown(completions, names=dict(ctx.names)),
    ]))


def group_kind(tie: bool, tie_kind: object) -> str:
    """"mixed" for a group that was not a tie, else its tie kind."""
    return "mixed" if not tie else str(tie_kind)


def pick_groups(completions: pd.DataFrame, kinds: Sequence[str] = ("mixed", "all_correct", "all_wrong", "other"),
                per_kind: int = 1) -> pd.DataFrame:
    """The groups to show: per difficulty and kind, the `per_kind` drawn last (latest step; then job
    and group order). One row per group: job, step, group, difficulty, kind, prompt_id, prompt."""
    if completions.empty:
        return pd.DataFrame(columns=["job", "step", "group", "difficulty", "kind", "prompt_id", "prompt"])
    groups = completions.groupby(["job", "step", "group"], sort=False).first().reset_index()
    groups["kind"] = [group_kind(t, k) for t, k in zip(groups["tie"], groups["tie_kind"])]
    groups = groups[groups["kind"].isin(kinds)]
    picked = (groups.sort_values(["step", "job", "group"], ascending=[False, True, True])
              .groupby(["difficulty", "kind"], sort=False).head(per_kind))
    order = {d: i for i, d in enumerate(natural_sorted(picked["difficulty"].unique()))}
    rank = {k: i for i, k in enumerate(kinds)}
    picked = picked.assign(_d=picked["difficulty"].map(order), _k=picked["kind"].map(rank))
    columns = ["job", "step", "group", "difficulty", "kind", "prompt_id", "prompt"]
    return picked.sort_values(["_d", "_k", "step"], ascending=[True, True, False])[columns].reset_index(drop=True)


def code(text: str, max_chars: int = MAX_CHARS) -> str:
    """Untrusted text as an inline code span safe inside a markdown table cell: newlines shown as ⏎,
    pipes escaped, cut to `max_chars`, backticks fenced by longer runs."""
    if text == "":
        return "(empty)"
    shown = text if len(text) <= max_chars else text[:max_chars] + "…"
    shown = shown.replace("\r", "").replace("\n", "⏎").replace("|", "\\|")
    longest = run = 0  # the longest run of backticks inside: the fence must be longer
    for ch in shown:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def examples_markdown(completions: pd.DataFrame, per_kind: int = 1, max_chars: int = MAX_CHARS,
                      names: dict[str, str] | None = None) -> str:
    """Markdown: per difficulty, a mixed group, an all-correct and an all-wrong tie (whichever were
    kept), each with its prompt and every kept completion with its reward. `names`: what each
    difficulty label is ("1" -> "1+1 digits"), shown beside it."""
    if completions.empty:
        return "No completions were kept (train with `log_completions=N` to keep N a step)."
    picked = pick_groups(completions, per_kind=per_kind)
    by_group = completions.groupby(["job", "step", "group"], sort=False)
    out = []
    for difficulty in natural_sorted(picked["difficulty"].unique()):
        name = (names or {}).get(str(difficulty))
        out.append(f"#### Difficulty {difficulty}" + (f" ({name})" if name else ""))
        for g in picked[picked["difficulty"] == difficulty].itertuples(index=False):
            rows = by_group.get_group((g.job, g.step, g.group)).sort_values("sample")
            size = int(rows["group_size"].iloc[0])
            right = int(rows["correct"].sum())
            score = f"{right}/{size} correct" if len(rows) == size else \
                f"{right} of the {len(rows)} kept of {size} correct"
            out.append(f"**{KINDS[g.kind]}** ({score}; "
                       f"job {g.job}, step {g.step}, prompt `{g.prompt_id}`): {code(str(g.prompt), max_chars)}")
            lines = ["| sample | completion | reward | correct |", "|---|---|---|---|"]
            lines += [f"| {r.sample} | {code(str(r.completion), max_chars)} | {r.reward:g} | "
                      f"{'yes' if r.correct else 'no'} |"
                      for r in rows.itertuples(index=False)]
            out.append("\n".join(lines))
    return "\n\n".join(out)
