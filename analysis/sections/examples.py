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
QUESTION_COLUMNS = ("question",)  # a column of the raw question, where a table has one: shown as it is
# (where a user turn begins, where it may end) in common chat templates: the question is the last user turn
USER_TURNS = (
    ("<|im_start|>user", ("<|im_end|>",)),  # ChatML: SmolLM2, Qwen
    ("<|start_header_id|>user<|end_header_id|>", ("<|eot_id|>",)),  # Llama 3
    ("<start_of_turn>user", ("<end_of_turn>",)),  # Gemma
    ("<|user|>", ("<|end|>", "</s>", "<|assistant|>")),  # Phi-3, Zephyr
    ("[INST]", ("[/INST]",)),  # Llama 2, Mistral
)


def section(completions: pd.DataFrame, ctx: Context, replies: pd.DataFrame | None = None) -> Section | None:
    """The examples section from the completions tables (`analysis.data.completions`) and the base evaluation's
    kept replies (eval rows at step 0 with a `completion`); None without either."""
    replies = base_replies(replies)
    if completions.empty and replies.empty:
        return None
    parts = ["## Example completions", "",
             "Completions are untrusted model output, shown as code, cut at 60 characters."]
    if not replies.empty:
        parts += ["", "### The base model's replies", "",
                  "The first replies of each difficulty at the base evaluation (step 0), as scored: `answer` is what "
                  "the task read from the reply (empty: none could be read in its answer format).", "",
                  replies_markdown(replies, dict(ctx.names))]
    if not completions.empty:
        parts += ["", "### Training groups", "",
                  "Kept by the first step (the first group of each difficulty) and by `log_completions=N` (the first "
                  "N completions of each step, whole groups): per difficulty the latest mixed group, all-correct tie "
                  "and all-wrong tie, with every kept completion and its reward.", "",
                  examples_markdown(completions, names=dict(ctx.names))]
    return Section(text="\n".join(parts))


def base_replies(eval_rows: pd.DataFrame | None, per_difficulty: int = 2) -> pd.DataFrame:
    """The base evaluation's kept replies, the first `per_difficulty` of each difficulty of the first job that
    kept any (rows: job, difficulty, prompt_id, answer, correct, completion, question: "" where the rows hold no
    prompt text)."""
    columns = ["job", "difficulty", "prompt_id", "answer", "correct", "completion"]
    if eval_rows is None or eval_rows.empty or "completion" not in eval_rows:
        return pd.DataFrame(columns=[*columns, "question"])
    kept = eval_rows[(eval_rows["step"] == 0) & eval_rows["completion"].notna()]
    if kept.empty:
        return pd.DataFrame(columns=[*columns, "question"])
    kept = kept[kept["job"].astype(str) == str(kept["job"].iloc[0])]
    kept = kept.groupby(kept["difficulty"].astype(str), sort=False).head(per_difficulty)
    return kept[columns].assign(question=questions(kept))


def replies_markdown(replies: pd.DataFrame, names: dict[str, str]) -> str:
    """The base model's replies as one table, by difficulty."""
    lines = ["| difficulty | prompt | reply | answer | correct |", "|---|---|---|---|---|"]
    for difficulty in natural_sorted(replies["difficulty"].astype(str).unique()):
        shown = f"{difficulty} ({names[difficulty]})" if difficulty in names else difficulty
        for r in replies[replies["difficulty"].astype(str) == difficulty].itertuples(index=False):
            answer = "" if pd.isna(r.answer) else code(str(r.answer))
            asked = f": {code(r.question)}" if r.question else ""
            lines.append(f"| {shown} | `{r.prompt_id}`{asked} | {code(str(r.completion))} | {answer} | "
                         f"{'yes' if r.correct else 'no'} |")
    return "\n".join(lines)


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
    columns = ["job", "step", "group", "difficulty", "kind", "prompt_id", "prompt",
               *(c for c in QUESTION_COLUMNS if c in picked)]
    return picked.sort_values(["_d", "_k", "step"], ascending=[True, True, False])[columns].reset_index(drop=True)


def last_user_turn(prompt: str) -> str | None:
    """The text of the last user turn of a chat-templated prompt (one of USER_TURNS), stripped; None where the
    prompt is in none of them."""
    for start, ends in USER_TURNS:
        at = prompt.rfind(start)
        if at >= 0:
            turn = prompt[at + len(start):]
            cut = min((i for i in (turn.find(end) for end in ends) if i >= 0), default=len(turn))
            return turn[:cut].strip()
    return None


def question_text(prompt: object, max_chars: int = MAX_CHARS) -> str:
    """What a reader needs of a prompt: its last user turn, else (a plain prompt, a template not known) its
    end, where a prompt ends in its question: "…" and its last `max_chars` − 1 characters where cut."""
    text = "" if pd.isna(prompt) else str(prompt)
    turn = last_user_turn(text)
    if turn is not None:
        return turn
    return text if len(text) <= max_chars else "…" + text[1 - max_chars:].lstrip()


def questions(rows: pd.DataFrame, max_chars: int = MAX_CHARS) -> pd.Series:
    """Each row's question: a column of the raw question where the table has one (QUESTION_COLUMNS), else read
    from its `prompt` (`question_text`)."""
    raw = next((c for c in QUESTION_COLUMNS if c in rows), None)
    read = rows["prompt"].map(lambda p: question_text(p, max_chars)) if "prompt" in rows else \
        pd.Series("", index=rows.index)
    return read if raw is None else rows[raw].where(rows[raw].notna(), read).astype(str)


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
    picked = picked.assign(question=questions(picked, max_chars))
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
                       f"job {g.job}, step {g.step}, prompt `{g.prompt_id}`): {code(g.question, max_chars)}")
            lines = ["| sample | completion | reward | correct |", "|---|---|---|---|"]
            lines += [f"| {r.sample} | {code(str(r.completion), max_chars)} | {r.reward:g} | "
                      f"{'yes' if r.correct else 'no'} |"
                      for r in rows.itertuples(index=False)]
            out.append("\n".join(lines))
    return "\n\n".join(out)
