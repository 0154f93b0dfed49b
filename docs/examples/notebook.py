"""A sweep's tables in pandas, and two of its report's Findings recomputed from them with `analysis.api`.

    python docs/examples/notebook.py multirun/2026-12-01/10-00-00

Paste the body of `reproduce` into a notebook cell to start your own plots. The test suite runs this file on a
generated sweep and checks its numbers against the report's tests table (tests/test_notebook_example.py).
"""

from __future__ import annotations

import sys

import pandas as pd

from analysis import api


def reproduce(sweep: str) -> dict[str, pd.DataFrame]:
    """The frames a notebook starts from, and the report's wasted_frac and first-round tie fraction
    comparisons between arms (the tests table's rows of those metrics)."""
    tables = api.load(sweep)  # one DataFrame per table; every row carries its job's config as columns
    arm = api.arm_keys(tables.jobs, tables.config_columns)  # e.g. ["sampler"]: what the report compares
    groups = tables.groups[~tables.groups["reused"].fillna(False).astype(bool)] if "reused" in tables.groups \
        else tables.groups  # replayed groups were drawn (and counted) once, at an earlier step

    # first rounds by difficulty and arm, with 95% intervals clustered by prompt (the Ties section's table)
    first = groups[groups["round"] == 0]
    ties = api.tie_fractions(first, by=arm)

    # each job's wasted fraction, then the arms compared across seeds (paired by seed: an exact sign-flip test)
    wasted = api.compare_arms_by_seed(api.per_job_spend(groups, arm), arm, ["wasted_frac"])

    # each job's first-round tie fraction (beside its arm and seed), compared the same way
    tied = api.compare_arms_by_seed(api.per_job_first_rounds(groups, arm).reset_index(), arm, ["tie_frac"])
    return {"ties_by_difficulty": ties, "wasted_frac": wasted, "tie_frac": tied}


if __name__ == "__main__":
    for name, frame in reproduce(sys.argv[1]).items():
        print(f"\n{name}\n{frame.to_string(index=False)}")
