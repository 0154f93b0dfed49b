"""A few completions a step (`log_completions=N`) as rows of the completions table: whole groups, in
draw order, so a reader sees a tied group next to a mixed one."""

from __future__ import annotations

from grpo_lab.samplers import Group

# from its group row
GROUP_KEYS = ("run_id", "step", "prompt_id", "difficulty", "round", "group_size", "tie", "tie_kind", "used")


def completion_rows(groups: list[Group], group_rows: list[dict], keep: int) -> list[dict]:
    """Rows for the first groups drawn this step, whole, while they fit in `keep` completions (the
    first group cut to `keep` when keep < G). `group_rows`: the same groups' groups-table rows."""
    rows: list[dict] = []
    for index, (grp, row) in enumerate(zip(groups, group_rows)):
        g = len(grp.rewards)
        if rows and len(rows) + g > keep:
            break
        truncated = grp.samples.truncated.tolist()
        for j in range(min(g, keep)):
            rows.append(dict({k: row[k] for k in GROUP_KEYS}, group=index, sample=j, prompt=grp.problem.prompt,
                             completion=grp.samples.texts[j], reward=float(grp.rewards[j]),
                             correct=bool(grp.correct[j]), truncated=bool(truncated[j])))
    return rows
