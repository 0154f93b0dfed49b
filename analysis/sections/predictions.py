"""Predicted pass rates: how near a predicting sampler's prediction of each prompt's pass rate came to the rate
its group then had, by arm and difficulty (analysis/measures/predictions.py)."""

from __future__ import annotations

from analysis.data.load import Tables
from analysis.measures.predictions import NEAR, prediction_errors
from analysis.render.writer import Files
from analysis.sections.section import Context, Section


def section(tables: Tables, ctx: Context) -> Section | None:
    """The section; None where no group carries a prediction."""
    table = prediction_errors(tables.groups, ctx.arm)
    if table.empty:
        return None
    files = Files()
    return Section(text="\n".join([
        "## Predicted pass rates", "",
        "Arms whose sampler predicts a prompt's pass rate before drawing it: MoPPS its Beta posterior's mean, SPO "
        "its tracker's value (the answer's baseline). `predicted` and `realised` are the means over the groups "
        "that carry a prediction of the prediction and of the group's pass rate (right answers / answers; SPO's "
        "groups are one answer, 0 or 1). `abs_error` is |predicted − realised|, each job's mean, then the mean "
        "over jobs with Student's t 95% interval over seeds (a job's groups share prompts and a drifting policy: "
        f"the seed is the unit). `near` is the share of groups predicted within {NEAR:g}: for SPO's answers, those "
        "whose advantage before the batch's normalisation was at most that, answers its tracker foresaw, which "
        "teach little (a GRPO group of 8 has such answers only when it ties).", "",
        files.table("predictions", table),
    ]), files=files)
