"""The table contract as the analysis checks it: each part's columns, their kinds, and values that
would silently bend a statistic (a null `tie`, a NaN reward). A copy of grpo_lab/run/tables.py's
schemas by *kind* (any int width is an int): analysis never imports grpo_lab.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# column -> kind; "?" ends the kind of a column that may hold nulls (token counts: null in a run ingested from logs
# that hold none, every row of it; grpo-lab's own runs always count them)
CONTRACT: dict[str, dict[str, str]] = {
    "groups": {
        "run_id": "string", "step": "int", "prompt_id": "string", "difficulty": "string", "round": "int",
        "group_size": "int", "rewards": "list<float>", "correct": "list<bool>", "reward_mean": "float",
        "reward_std": "float", "n_correct": "int", "tie": "bool", "tie_kind": "string?", "used": "bool",
        "tokens": "int?", "samples_total": "int", "tokens_total": "int?",
    },
    "steps": {
        "run_id": "string", "step": "int", "loss": "float?", "pg_loss": "float?", "kl": "float?",
        "clip_frac": "float?", "grad_norm": "float?", "lr": "float?", "reward_mean": "float?", "accuracy": "float?",
        "tie_frac": "float?", "groups": "int", "samples": "int", "samples_total": "int", "tokens_total": "int?",
        "t_rollout": "float?", "t_update": "float?", "t_total": "float?",
    },
    "eval": {
        "run_id": "string", "step": "int", "prompt_id": "string", "difficulty": "string", "sample": "int",
        "answer": "string?", "correct": "bool", "tokens": "int?",
    },
}
# columns a part may lack (written before they existed), checked like the contract's where present: an eval row's
# sampling settings (analysis/data/settings.py; null in rows of an older part put beside a newer one)
OPTIONAL: dict[str, dict[str, str]] = {
    "eval": {"n": "int?", "temperature": "float?", "top_p": "float?", "max_new_tokens": "int?",
             "tokens_total": "int?", "answered": "bool?", "completion": "string?", "prompt": "string?",
             "gold": "string?"},
    # a predicting sampler's pass rates (mopps, spo) and the answers read, in groups written since they were recorded
    "groups": {"predicted_rate": "float?", "n_answered": "int?"},
    # the rollout/train mismatch (grpo_lab/train/rollout_correction.py), in steps written since rollout.engine
    # and how tied units entered the update (grpo_lab/advantage/ties.py), in steps written since they were recorded
    "steps": {c: "float?" for c in ("rollout_logp_diff_mean", "rollout_logp_diff_max", "rollout_kl",
                                    "rollout_ratio_mean", "rollout_ess", "rollout_capped", "tied_norm_share",
                                    "kl_grad_tied", "kl_grad_untied")},
}
# columns whose NaN would enter a statistic as a number
NO_NAN: dict[str, tuple[str, ...]] = {"groups": ("rewards", "reward_mean", "reward_std"), "steps": (),
                                      "eval": ("temperature", "top_p")}


def kind(t: pa.DataType) -> str:
    """An arrow type's kind: int, float, bool, string, null, list<kind>, or its own name."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{kind(t.value_type)}>"
    return str(t)


def schema_problem(table: str, schema: pa.Schema) -> str | None:
    """What is wrong with a part's file schema (missing or mistyped contract columns), or None."""
    expected = CONTRACT[table]
    missing = [c for c in expected if c not in schema.names]
    if missing:
        return f"missing column{'s' * (len(missing) > 1)} {', '.join(missing)}"
    optional = {c: want for c, want in OPTIONAL.get(table, {}).items() if c in schema.names}
    for column, want in {**expected, **optional}.items():
        got = kind(schema.field(column).type)
        nullable = want.endswith("?")
        if got != want.rstrip("?") and not (nullable and got == "null"):
            return f"column {column} is {schema.field(column).type}, not {want.rstrip('?')}"
    return None


def value_problems(table: str, parts: Sequence[pa.Table]) -> list[str | None]:
    """What is wrong with the values of each part (of one table of one job) among the columns read: nulls in
    a required column or NaN in a reward column, the first found in column order; None where nothing is.
    Each column is checked over all parts at once, and part by part only where something is found."""
    found: list[str | None] = [None] * len(parts)
    if not parts:
        return found
    try:  # zero-copy where the parts share one schema (a run's do)
        whole = pa.concat_tables(parts, promote_options="permissive")
    except pa.ArrowException:  # parts that cannot be put together: each checked alone (one part always can)
        return [value_problems(table, [part])[0] for part in parts]
    ends = np.cumsum([part.num_rows for part in parts])  # (parts,) each part's last row + 1 in `whole`
    expected = {**CONTRACT[table], **OPTIONAL.get(table, {})}
    # a contract column is in every part (its schema passed)
    for column in (c for c in whole.column_names if c in expected):
        want = expected[column]
        values = whole.column(column)
        if not want.endswith("?") and values.null_count:  # arrow keeps the count: no pass over the values
            for i, part in enumerate(parts):
                nulls = part.column(column).null_count
                if nulls and found[i] is None:
                    found[i] = f"{nulls} null{'s' * (nulls > 1)} in column {column}"
        if column in NO_NAN[table]:
            nans = _nan_counts(values, ends, want.startswith("list"))
            for i in np.flatnonzero(nans):
                if found[i] is None:
                    n = int(nans[i])
                    found[i] = f"{n} NaN value{'s' * (n > 1)} in column {column}"
    starts = np.r_[0, ends[:-1]]
    for row, problem in impossible_rows(table, whole):  # rows the contract's meaning rules out
        i = int(np.searchsorted(ends, row, side="right"))
        if found[i] is None:
            found[i] = f"row {row - starts[i]}: {problem}"
    return found


def impossible_rows(table: str, whole: pa.Table) -> list[tuple[int, str]]:
    """(row, what is impossible in it) for the first row that breaks each rule the schema implies, over one job's
    table in part order: a count outside its group, an infinite reward, a tie flag that disagrees with its kind or
    its rewards, steps or cumulative samples that go backwards. Checked among the columns read."""
    have = set(whole.column_names)

    def col(name: str) -> np.ndarray:
        values = whole.column(name)
        if pa.types.is_dictionary(values.type):  # read as a dictionary: its values, nulls kept as None
            values = values.cast(values.type.value_type)
        return values.to_numpy(zero_copy_only=False)

    rules: list[tuple[np.ndarray, object]] = []
    if table == "groups" and {"n_correct", "group_size"} <= have:
        n, g = col("n_correct"), col("group_size")
        rules.append(((n < 0) | (n > g), lambda r: f"n_correct {n[r]} outside 0..group_size {g[r]}"))
    for name in ("reward_mean", "reward_std") if table == "groups" else ():
        if name in have:
            v = col(name).astype(np.float64)
            rules.append((np.isinf(v), lambda r, v=v, name=name: f"{name} {v[r]} is not finite"))
    if table == "groups" and {"tie", "tie_kind"} <= have:
        tie, kind = col("tie").astype(bool), col("tie_kind")
        named = np.array([k is not None for k in kind])
        rules.append((tie != named, lambda r: f"tie {tie[r]} with tie_kind {kind[r]}"))
        if {"n_correct", "group_size"} <= have:
            n, g = col("n_correct"), col("group_size")
            rules.append(((kind == "all_correct") & (n != g), lambda r: f"tie_kind all_correct with n_correct {n[r]} "
                                                                        f"of {g[r]}"))
            rules.append(((kind == "all_wrong") & (n != 0), lambda r: f"tie_kind all_wrong with n_correct {n[r]}"))
        if {"reward_std", "group_size"} <= have:  # every reward equal is a tie (a group of one ties with nothing)
            std, g = col("reward_std"), col("group_size")
            rules.append(((~tie) & (std == 0) & (g > 1), lambda r: "not tied though every reward is equal "
                                                                   "(reward_std 0)"))
    if "step" in have and table in ("groups", "steps"):
        step = col("step").astype(np.int64)
        back = np.r_[False, (step[1:] <= step[:-1]) if table == "steps" else (step[1:] < step[:-1])]
        rules.append((back, lambda r: f"step {step[r]} after step {step[r - 1]}"))
    if "samples_total" in have and table in ("groups", "steps"):
        total = col("samples_total").astype(np.float64)  # null (NaN here) where not recorded: never backwards
        back = np.r_[False, total[1:] < total[:-1]]
        rules.append((back, lambda r: f"samples_total {total[r]:.0f} after {total[r - 1]:.0f}"))
    out = []
    for broken, say in rules:
        if broken.any():
            row = int(np.flatnonzero(broken)[0])
            out.append((row, say(row)))
    return out


def _nan_counts(values: pa.ChunkedArray, ends: np.ndarray, lists: bool) -> np.ndarray:
    """NaNs among `values` (floats or lists of floats, the parts' rows one after another) in each part,
    the parts ending at rows `ends`, counted in one pass."""
    if lists:  # a part's elements end where its rows' lists do
        lengths = np.asarray(pc.fill_null(pc.list_value_length(values), 0), dtype=np.int64)
        ends = np.r_[0, np.cumsum(lengths)][ends]
        values = pc.list_flatten(values)
    nan = np.asarray(pc.fill_null(pc.is_nan(values), False), dtype=np.int64)
    total = np.r_[0, np.cumsum(nan)]
    return np.diff(np.r_[0, total[ends]])
