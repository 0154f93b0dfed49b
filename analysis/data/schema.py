"""The table contract as the analysis checks it: each part's columns, their kinds, and values that
would silently bend a statistic (a null `tie`, a NaN reward). A copy of grpo_lab/tables.py's
schemas by *kind* (any int width is an int): analysis never imports grpo_lab.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# column -> kind; "?" ends the kind of a column that may hold nulls
CONTRACT: dict[str, dict[str, str]] = {
    "groups": {
        "run_id": "string", "step": "int", "prompt_id": "string", "difficulty": "string", "round": "int",
        "group_size": "int", "rewards": "list<float>", "correct": "list<bool>", "reward_mean": "float",
        "reward_std": "float", "n_correct": "int", "tie": "bool", "tie_kind": "string?", "used": "bool",
        "tokens": "int", "samples_total": "int", "tokens_total": "int",
    },
    "steps": {
        "run_id": "string", "step": "int", "loss": "float?", "pg_loss": "float?", "kl": "float?",
        "clip_frac": "float?", "grad_norm": "float?", "lr": "float?", "reward_mean": "float?", "accuracy": "float?",
        "tie_frac": "float?", "groups": "int", "samples": "int", "samples_total": "int", "tokens_total": "int",
        "t_rollout": "float?", "t_update": "float?", "t_total": "float?",
    },
    "eval": {
        "run_id": "string", "step": "int", "prompt_id": "string", "difficulty": "string", "sample": "int",
        "answer": "string?", "correct": "bool", "tokens": "int",
    },
}
# columns whose NaN would enter a statistic as a number
NO_NAN: dict[str, tuple[str, ...]] = {"groups": ("rewards", "reward_mean", "reward_std"), "steps": (), "eval": ()}


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
    for column, want in expected.items():
        got = kind(schema.field(column).type)
        nullable = want.endswith("?")
        if got != want.rstrip("?") and not (nullable and got == "null"):
            return f"column {column} is {schema.field(column).type}, not {want.rstrip('?')}"
    return None


def value_problem(table: str, data: pa.Table) -> str | None:
    """Nulls in required columns or NaN in reward columns among the columns read, or None."""
    expected = CONTRACT[table]
    for column in data.column_names:
        want = expected.get(column)
        if want is None:
            continue
        values = data.column(column)
        if not want.endswith("?") and values.null_count:
            return f"{values.null_count} null{'s' * (values.null_count > 1)} in column {column}"
        if column in NO_NAN[table]:
            flat = pc.list_flatten(values) if want.startswith("list") else values
            nans = pc.sum(pc.is_nan(flat)).as_py() or 0
            if nans:
                return f"{nans} NaN value{'s' * (nans > 1)} in column {column}"
    return None
