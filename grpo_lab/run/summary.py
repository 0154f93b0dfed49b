"""The end-of-run summary: a finished run's key numbers in a few lines, read from its tables."""

from __future__ import annotations

from pathlib import Path

from grpo_lab.progress import duration


def run_summary(run_dir: Path, seconds: float) -> str:
    """A finished run's key numbers in a few lines, from its tables: spend, training reward and
    ties, held-out accuracy at the first and last evaluation."""
    from grpo_lab.run.tables import read_table

    steps = read_table(run_dir, "steps").to_pandas()
    groups = read_table(run_dir, "groups").to_pandas()
    groups = groups[~groups["reused"].fillna(False).astype(bool)]  # replays are not draws: ties are of draws
    ev = read_table(run_dir, "eval", own=True).to_pandas()  # the run's own evaluation, not experiments.evaluate's
    lines = [f"run finished: {run_dir}"]
    if steps.empty:
        return lines[0] + " (no steps)"
    last = steps.iloc[-1]
    lines[0] += (f" ({int(last['step'])} steps, {int(last['samples_total']):,} samples, "
                 f"{int(last['tokens_total']):,} tokens, {duration(seconds)} this session)")
    tenth = max(len(steps) // 10, 1)
    lines.append(f"  train reward {steps['reward_mean'].iloc[:tenth].mean():.3f} -> "
                 f"{steps['reward_mean'].iloc[-tenth:].mean():.3f} (first and last tenth of the steps); "
                 f"ties {groups['tie'].mean():.3f} of {len(groups):,} groups (all-correct "
                 f"{(groups['tie_kind'] == 'all_correct').mean():.3f}, "
                 f"all-wrong {(groups['tie_kind'] == 'all_wrong').mean():.3f})")
    if not ev.empty:
        first, final = ev["step"].min(), ev["step"].max()
        acc = ev.groupby(["step", "difficulty"])["correct"].mean()
        total = ev.groupby("step")["correct"].mean()
        levels = ", ".join(f"{d} {acc[first, d]:.2f} -> {acc[final, d]:.2f}" for d in sorted(set(ev["difficulty"]))
                           if (first, d) in acc.index and (final, d) in acc.index)
        lines.append(f"  held-out accuracy: step {first} {total[first]:.3f} -> step {final} {total[final]:.3f} "
                     f"(by difficulty: {levels})")
    return "\n".join(lines)
