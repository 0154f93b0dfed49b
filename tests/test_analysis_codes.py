"""Integer codes for group-bys (analysis/data/codes.py) against what numpy and pandas compute directly."""

import numpy as np
import pandas as pd
import pytest

from analysis.data.arms import job_arms, value_text
from analysis.data.codes import cell_codes, dense_ranks, group_ids, stable_order, text_codes


@pytest.mark.parametrize("negative", [False, True])  # negative: never codes, always hashed
@pytest.mark.parametrize("high", [5, 3000, 10**12])  # the counting table, and the hashing past it
def test_dense_ranks_are_numpys_unique_inverse(high, negative):
    values = np.random.default_rng(high % 97).integers(0, high, 5000) - (high // 2 if negative else 0)
    distinct, inverse = np.unique(values, return_inverse=True)
    ranks, keys = dense_ranks(values, keys=True)
    np.testing.assert_array_equal(ranks, inverse)
    np.testing.assert_array_equal(keys, distinct)
    floats = values / 7  # not codes: sorted, as numpy does
    np.testing.assert_array_equal(dense_ranks(floats), np.unique(floats, return_inverse=True)[1])


@pytest.mark.parametrize("high", [5, 3000, 10**12])  # counted, then hashed
def test_group_ids_group_the_rows_as_numpy_unique_does(high):
    values = np.random.default_rng(high % 89).integers(0, high, 5000)
    ids, distinct = group_ids(values)
    np.testing.assert_array_equal(distinct[ids], values)  # each id names its value
    assert len(distinct) == len(np.unique(values))  # one id per distinct value
    assert set(ids.tolist()) == set(range(len(distinct)))


@pytest.mark.parametrize("high", [3, 60000, 2**40])  # one, two and three 16-bit digits
def test_stable_order_is_a_stable_argsort(high):
    codes = np.random.default_rng(1).integers(0, high, 20000)
    np.testing.assert_array_equal(stable_order(codes), np.argsort(codes, kind="stable"))


def test_text_codes_group_as_the_values_as_text_do():
    column = pd.Series(pd.Categorical([1.0, 2.5, None, 10.0, 2.5, 1.0]))
    codes, labels = text_codes(column)
    text = column.map(value_text)  # a missing value is named "null", a label like any other
    assert list(labels) == sorted(text.unique()) == ["1.0", "10.0", "2.5", "null"]  # codes sort as the texts do
    assert list(labels[codes]) == list(text)
    plain = pd.Series(["b", "a", "b", "c"])
    codes, labels = text_codes(plain)
    assert list(labels[codes]) == list(plain) and list(labels) == ["a", "b", "c"]


def test_cell_codes_find_the_cells_a_group_by_finds():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({
        "difficulty": pd.Categorical(rng.choice(["1", "2", "10"], 400)),
        "sampler": pd.Categorical(rng.choice(["fixed", "band", None], 400)),
        "window": rng.integers(0, 5, 400) * 10,
        "name": rng.choice(["x", "y"], 400),
    })
    keys = ["difficulty", "sampler", "window", "name"]
    cell, values = cell_codes(frame, keys)
    groups = frame.groupby(keys, observed=True, dropna=False)
    assert len(values) == groups.ngroups
    for c, key in enumerate(values):  # each cell's rows are exactly one group's, keyed by its values
        rows = np.flatnonzero(cell == c)
        match = np.ones(len(frame), bool)
        for k, v in zip(keys, key):
            match &= frame[k].isna().to_numpy() if pd.isna(v) else (frame[k] == v).to_numpy()
        np.testing.assert_array_equal(rows, np.flatnonzero(match))


@pytest.mark.parametrize("order", ["runs", "shuffled", "filtered"])
def test_job_arms_are_the_first_row_a_group_by_finds(order):
    """Each job's first row, read without grouping every row: as `groupby("job").first(skipna=False)`, jobs in
    their categories' order, a null kept, a key that varies within a job (group_size) read from the first
    row, a job with no rows left out, rows in any order."""
    rng = np.random.default_rng(5)
    jobs = [f"j{i}" for i in range(6)]
    job = np.repeat(np.arange(5), 40)  # j5 has no rows
    frame = pd.DataFrame({
        "job": pd.Categorical.from_codes(job, categories=jobs),
        "sampler": pd.Categorical(np.array(["fixed", "band", None, "band", "fixed"], dtype=object)[job]),
        "seed": pd.Categorical(np.array([0, 1, 0, 1, 0])[job]),
        "group_size": rng.integers(4, 9, len(job)),
    })
    if order == "shuffled":
        frame = frame.iloc[rng.permutation(len(frame))]
    if order == "filtered":
        frame = frame[rng.random(len(frame)) < 0.3]
    keys = ["sampler", "seed", "group_size"]
    pd.testing.assert_frame_equal(job_arms(frame, keys), frame.groupby("job", observed=True)[keys].first(skipna=False))
