"""Plain references the tests compare fast paths against (shared by several test files)."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from grpo_lab.model.forward import token_logprobs
from grpo_lab.rollout.generate import Rollout
from grpo_lab.run.tables import read_table, varying_columns


def plain_logprobs(model, ro: Rollout, temperature: float) -> torch.Tensor:
    """Each of the N sequences run in full (its prompt repeated G times), no cache, full logits."""
    g = ro.group_size
    ids = torch.cat([ro.prompt_ids.repeat_interleave(g, 0), ro.completion_ids], 1)
    mask = torch.cat([ro.prompt_mask.repeat_interleave(g, 0), torch.ones_like(ro.completion_ids)], 1)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    p = ro.prompt_ids.shape[1]
    return token_logprobs(logits[:, p - 1:-1], ro.completion_ids, temperature).masked_fill(~ro.completion_mask, 0.0)


def assert_same_rows(full: Path, resumed: Path, tables=("groups", "eval"), approx: tuple[str, ...] = (),
                     rtol: float = 1e-4, rounding: tuple[str, ...] = ()) -> None:
    """A resumed run's table rows equal an uninterrupted run's: run ids, wall-clock and CPU timings aside, NaN equal to
    NaN (a sample that did not train, a step with nothing to learn). Columns in `approx` (numbers, or arrays of
    them) to `rtol`: what a policy computes after updates that agree to float rounding only. Columns in `rounding`
    to 1e-4 absolute: measures of float rounding themselves (the rollout/train mismatch of one model's two passes),
    which two reduction orders make different in every digit."""
    import numpy as np
    import pandas as pd

    for table in tables:
        frames = []
        for run in (full, resumed):
            t = read_table(run, table)
            frames.append(t.drop_columns(varying_columns(t.column_names)).to_pandas())
        assert len(frames[0]) > 0, table
        close = [c for c in approx if c in frames[0]]
        noise = [c for c in rounding if c in frames[0]]
        pd.testing.assert_frame_equal(*(f.drop(columns=close + noise) for f in frames))
        for c, r, a_tol in [(c, rtol, 1e-7) for c in close] + [(c, 0.0, 1e-4) for c in noise]:
            a, b = (np.concatenate([np.ravel(v) for v in f[c]]).astype(np.float64) for f in frames)
            np.testing.assert_allclose(b, a, rtol=r, atol=a_tol, err_msg=f"{table}.{c}")


def plain_grpo(rewards: list[float], eps: float = 1e-8) -> list[float]:
    """Eq. 3 for one group, a loop: (r - mean) / population std, exactly 0 for a tie."""
    g = len(rewards)
    mean = sum(rewards) / g
    sd = (sum((r - mean) ** 2 for r in rewards) / g) ** 0.5
    return [0.0 if sd <= eps else (r - mean) / sd for r in rewards]


def plain_ngrpo(rewards: list[float], max_reward: float = 1.0, eps: float = 1e-6) -> list[float]:
    """NGRPO for one group, a loop: one virtual answer of max_reward in the mean and the Bessel std."""
    both = list(rewards) + [max_reward]
    mean = sum(both) / len(both)
    sd = (sum((r - mean) ** 2 for r in both) / (len(both) - 1)) ** 0.5
    return [(r - mean) / (sd + eps) for r in rewards]


def plain_rl_zvp(advantage: float, direction: int, entropy: list[float], alpha: float) -> list[float]:
    """RL-ZVP's token advantages for one response (its tokens only), a loop."""
    if direction > 0:
        return [alpha * h for h in entropy]
    if direction < 0:
        top = max(entropy)
        return [-alpha * (top - h) for h in entropy]
    return [advantage] * len(entropy)


def both_pages(report) -> str:
    """A report's two pages as one text, REPORT.md then DETAILS.md (the second page: provenance details, every
    test, the longer sections), for tests that read a section wherever it is."""
    report = Path(report)
    details = report.parent / "DETAILS.md"
    return report.read_text() + "\n" + (details.read_text() if details.exists() else "")


def findings(report) -> list[str]:
    """The bullets of a report's Findings (REPORT.md's first screen), without their "- "."""
    text = Path(report).read_text()
    start = text.index("## Findings")
    return [line[2:] for line in text[start:text.index("\n## ", start + 1)].splitlines() if line.startswith("- ")]


def in_words(report) -> list[str]:
    """The bullets of the second page's "Each comparison in words" (the long form behind the Findings), without
    their "- "; `report` the path of REPORT.md, DETAILS.md beside it. Empty where the section is not there."""
    text = (Path(report).parent / "DETAILS.md").read_text()
    if "## Each comparison in words" not in text:
        return []
    section = text.split("## Each comparison in words", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in section.splitlines() if line.startswith("- ")]


def report_lines(report) -> list[str]:
    """The Findings' bullets, then those of each comparison in words: every sentence a report says of its arms."""
    return findings(report) + in_words(report)


ROOT = Path(__file__).resolve().parent.parent


def train_sweep(root: Path, args: list[str], timeout: int = 900) -> Path:
    """`python -m experiments.train -m ARGS` into `root` (one thread a job), asserting it ends well."""
    out = subprocess.run([sys.executable, "-m", "experiments.train", "-m", *args, f"hydra.sweep.dir={root}"], cwd=ROOT,
                         text=True, capture_output=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return root


def raw(root: Path, table: str):
    """One table of every job of a sweep, read part by part with pandas (never through `analysis.load`), with
    the job's folder name as `job`."""
    import pandas as pd

    frames = [pd.read_parquet(p).assign(job=p.parent.parent.name)
              for p in sorted(root.glob(f"*/{table}/part-*.parquet"))]
    return pd.concat(frames, ignore_index=True)


def recount_budget(run) -> tuple:
    """The tables' counters against a recount of the groups table."""
    g = read_table(run, "groups").to_pandas()
    s = read_table(run, "steps").to_pandas()
    assert g["samples_total"].tolist() == g["group_size"].cumsum().tolist()
    assert g["tokens_total"].tolist() == g["tokens"].cumsum().tolist()
    per_step = g.groupby("step").agg(samples=("group_size", "sum"), groups=("group_size", "size"))
    assert s["samples"].tolist() == per_step["samples"].tolist()
    assert s["groups"].tolist() == per_step["groups"].tolist()
    assert s["samples_total"].tolist() == per_step["samples"].cumsum().tolist()
    assert (g["n_correct"] == g["correct"].map(sum)).all() and (g["group_size"] == g["rewards"].map(len)).all()
    return g, s


def assert_draw_bounds(cfg, least: int, most: int) -> None:
    """The budget checks know a sampler's draw: a budget below one step's fewest samples, or above what max_steps
    steps of its most can reach, is one line; the largest reachable one passes."""
    import pytest

    from grpo_lab.config.checks import validate
    from grpo_lab.errors import ConfigError

    cfg.max_samples = least - 1
    with pytest.raises(ConfigError, match=f"below one step's draw \\({least} samples"):
        validate(cfg)
    cfg.max_samples = cfg.max_steps * most + 1
    with pytest.raises(ConfigError, match=f"at most {most} samples"):
        validate(cfg)
    cfg.max_samples = cfg.max_steps * most
    validate(cfg)
