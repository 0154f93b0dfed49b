"""The report's numbers as functions on pandas frames, for notebooks and your own plots.

    from analysis import api
    tables = api.load("multirun/2026-12-01/10-00-00")      # groups, steps, eval, jobs: DataFrames
    arm = api.arm_keys(tables.jobs, tables.config_columns)  # the keys that tell arms apart, as the report's
    first = tables.groups[tables.groups["round"] == 0]
    api.tie_fractions(first, by=arm)                        # tie fractions by difficulty, prompt-clustered CIs
    api.compare_arms_by_seed(api.per_job_spend(tables.groups, arm), arm, ["wasted_frac"])  # a Findings line
    with api.label_order(api.difficulty_order(tables.jobs)):  # named difficulties in the order the runs recorded
        api.tie_fractions(first, by=arm)                        # ("easy, medium, hard"), as the report sorts them

Every function here is the one the report calls, so what a notebook computes from the same tables is what
the report prints (`docs/examples/notebook.py` reproduces two Findings numbers; the test suite runs it).
Each takes frames and returns a frame; intervals and tests are described in docs/REPORT_GUIDE.md.
"""

from analysis.data.arms import arm_keys, iter_arms
from analysis.data.labels import label_order
from analysis.data.load import Tables, load
from analysis.data.records import difficulty_order
from analysis.measures.comparisons import checkpoint_comparisons
from analysis.measures.coverage import coverage
from analysis.measures.equal_updates import comparisons as equal_update_comparisons
from analysis.measures.scores import prompt_scores
from analysis.measures.spend import budget_curves, per_job_spend, spend
from analysis.measures.ties import per_job_first_rounds, predict_ties, tie_fractions
from analysis.stats.at_k import cons_at_k, pass_at_k
from analysis.stats.seeds import compare_arms_by_seed, with_holm

__all__ = ["Tables", "arm_keys", "budget_curves", "checkpoint_comparisons", "compare_arms_by_seed", "cons_at_k",
           "coverage", "difficulty_order", "equal_update_comparisons", "iter_arms", "label_order", "load", "pass_at_k",
           "per_job_first_rounds",
           "per_job_spend", "predict_ties", "prompt_scores", "spend", "tie_fractions", "with_holm"]
