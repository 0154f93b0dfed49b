"""Completions kept as rows of the completions table: whole groups, in draw order, so a reader sees a tied group next
to a mixed one. A run's first step keeps the first group of each difficulty whatever `log_completions` says, so a
run that trained nothing still shows what its model replied."""

from __future__ import annotations

from grpo_lab.records import Group

# from its group row
GROUP_KEYS = ("run_id", "step", "prompt_id", "difficulty", "round", "group_size", "tie", "tie_kind", "used")


def kept_groups(groups: list[Group], keep: int, first_of_each_difficulty: bool = False) -> list[tuple[int, int]]:
    """(index of the group among `groups`, samples kept of it) of the groups whose completions are kept: the first
    ones drawn, whole, while they fit in `keep` completions (the first cut to `keep` when keep < G); with
    `first_of_each_difficulty`, also the first group of every difficulty, whole."""
    chosen: dict[int, int] = {}
    total = 0
    for index, grp in enumerate(groups):
        g = len(grp.rewards)
        if keep <= 0 or (chosen and total + g > keep):
            break
        chosen[index] = min(g, keep)
        total += chosen[index]
    if first_of_each_difficulty:
        seen: set[str] = set()
        for index, grp in enumerate(groups):
            if grp.problem.difficulty not in seen:
                seen.add(grp.problem.difficulty)
                chosen[index] = len(grp.rewards)
    return sorted(chosen.items())


def completion_rows(groups: list[Group], group_rows: list[dict], keep: int,
                    first_of_each_difficulty: bool = False) -> list[dict]:
    """Rows for the groups `kept_groups` chooses. `group_rows`: the same groups' groups-table rows."""
    rows: list[dict] = []
    for index, kept in kept_groups(groups, keep, first_of_each_difficulty):
        grp, row = groups[index], group_rows[index]
        truncated, lengths = grp.samples.truncated.tolist(), grp.samples.lengths.tolist()
        for j in range(kept):
            rows.append(dict({k: row[k] for k in GROUP_KEYS}, group=index, sample=j, prompt=grp.problem.prompt,
                             gold=grp.problem.answer, completion=grp.samples.texts[j],
                             answered=None if grp.answered is None else bool(grp.answered[j]),
                             answer=None if grp.answers is None else grp.answers[j], tokens=int(lengths[j]),
                             reward=float(grp.rewards[j]), correct=bool(grp.correct[j]), truncated=bool(truncated[j])))
    return rows
