"""Groups rebuilt from completions a tool logged in order but without a group id: the runs of one prompt within a
file, cut into groups of G (TRL's RepeatSampler and NeMo-RL's `repeat_interleave` both put a prompt's G completions
in a row), and the check that a group's logged advantages follow from its rewards (which catches rows grouped
otherwise than the tool grouped them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.ingest.logs import IngestError


def _file(samples: pd.DataFrame) -> np.ndarray:
    """Each row's file, from its `where` (file:line or file:row N)."""
    return samples["where"].str.rsplit(":", n=1).str[0].to_numpy()


def runs(samples: pd.DataFrame, key: str) -> list[np.ndarray]:
    """Row indices of each run of one `key` (the prompt, or what identifies it) within one file, in order."""
    file, value = _file(samples), samples[key].to_numpy()
    starts = np.flatnonzero(np.r_[True, (value[1:] != value[:-1]) | (file[1:] != file[:-1])])
    return np.split(np.arange(len(samples)), starts[1:])


def common_size(samples: pd.DataFrame, key: str, size_name: str) -> int:
    """G: the most common length of a run of one prompt, where every run is a multiple of it (a prompt drawn twice in
    a row is one run of 2G). A run that is not, a prompt logged 6 times among groups of 4, is refused at its row:
    a common divisor would silently cut every group in pieces."""
    found = runs(samples, key)
    lengths = np.array([len(run) for run in found])
    values, counts = np.unique(lengths, return_counts=True)
    g = int(values[np.argmax(counts)])  # ties: the smaller length
    if g < 2:
        raise IngestError(f"{_file(samples)[0]}: cannot tell {size_name}: most runs of one prompt are of one "
                          "completion (pass --group-size)")
    odd = np.flatnonzero(lengths % g)
    if len(odd):
        run = found[odd[0]]
        raise IngestError(f"{samples['where'].iloc[run[0]]}: {len(run)} consecutive completions of one prompt where "
                          f"most runs are {g} long: cannot tell {size_name} (pass --group-size)")
    return g


def consecutive_groups(samples: pd.DataFrame, key: str, g: int, size_name: str) -> np.ndarray:
    """Each row's group: its run's number and its place in the run, cut every `g` rows."""
    keys = np.empty(len(samples), dtype=object)
    for n, run in enumerate(runs(samples, key)):
        if len(run) % g:
            raise IngestError(f"{samples['where'].iloc[run[0]]}: {len(run)} consecutive completions of one prompt, "
                              f"not a multiple of the group size {g} ({size_name}: --group-size)")
        for k in range(0, len(run), g):
            keys[run[k:k + g]] = f"{n}.{k // g}"
    return keys


def advantages_off(samples: pd.DataFrame, groups: np.ndarray) -> np.ndarray | None:
    """The rows of the first group whose logged `advantage`s are not proportional to reward - group mean with one
    positive scale (what mean-centred advantages, over any std of the group, all are); None where every group's are.
    A group with any NaN advantage, or a reward that is no finite number, is not checked."""
    r = samples["reward"].to_numpy(np.float64)
    a = pd.to_numeric(samples["advantage"], errors="coerce").to_numpy(np.float64)
    for idx in pd.Series(np.arange(len(samples))).groupby(groups, sort=False).indices.values():
        adv = a[idx]
        if np.isnan(adv).any() or not np.isfinite(r[idx]).all():  # an infinite reward is refused when tables are built
            continue
        d = r[idx] - r[idx].mean()
        scale = float(d @ adv / (d @ d)) if (d @ d) > 0 else 0.0
        off = np.abs(adv - scale * d).max()
        if scale < 0 or off > 1e-3 * max(1.0, np.abs(adv).max()) + (1e-2 if scale == 0 else 0):
            return idx
    return None
