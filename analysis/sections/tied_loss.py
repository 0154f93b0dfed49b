"""How tied groups entered the loss: per arm, the keys that say it, the share of the loss's denominator tied units
took, the KL term's gradient from them against untied ones, and the batches that tied whole with the updates
skipped (`measures.tied_loss`). Left out for runs written before the steps table recorded it."""

from __future__ import annotations

from analysis.data.arms import short_label
from analysis.data.load import Tables
from analysis.measures.tied_loss import recorded, tied_loss_by_arm
from analysis.render import markdown
from analysis.render.writer import Files
from analysis.sections.section import Context, Section

TITLE = "How tied groups entered the loss"


def section(tables: Tables, ctx: Context) -> Section | None:
    """The section; None where no job recorded how tied units entered its loss."""
    if tables.steps.empty or not recorded(tables.steps):
        return None
    files = Files()
    by_arm = tied_loss_by_arm(tables.steps, list(ctx.arm))
    shown = by_arm.assign(arm=by_arm["arm"].map(short_label))
    cell = markdown.cell
    shown["tied share of the denominator"] = [
        f"{cell(r.tied_share, 3)} [{cell(r.tied_share_low, 3)}, {cell(r.tied_share_high, 3)}]"
        for r in by_arm.itertuples()]
    shown = shown.rename(columns={"kl_grad_tied": "KL grad, tied", "kl_grad_untied": "KL grad, untied",
                                  "kl_grad_ratio": "tied / untied", "all_tied_frac": "batches all tied",
                                  "skipped": "steps without an update"})
    columns = ["arm", "tied_kl", "tied_norm", "tied_batch", "tied share of the denominator", "KL grad, tied",
               "KL grad, untied", "tied / untied", "batches all tied", "updates", "steps without an update"]
    probed = int(by_arm["probed_steps"].sum())
    lines = [f"## {TITLE}", "",
             "A tied unit here is one whose every advantage is 0 (grpo_lab/advantage/ties.py): the policy gradient "
             "takes nothing from it, and three keys say what it still does (`algo.tied_kl`: its tokens' KL term kept "
             "or masked; `algo.tied_norm`: its rows counted in the loss's denominator or dropped; `algo.tied_batch`: "
             "a batch of tied units only stepped, skipped, or stepped on zeros). Per arm, from the steps table: the "
             "share of the denominator tied units took where it counts them (each job's mean over its steps with "
             "training rows; the mean over jobs [lowest, highest job]); dropping them scales every other unit's "
             "gradient by 1 / (1 − share) on that step. "
             + ("The norm of the beta × k3 KL term's gradient, as it entered the loss, from tied units and from untied "
                f"ones: means over the {probed:,} steps `algo.kl_grad_every` measured (0 from tied units where the "
                "term is masked), and the ratio of the two means. " if probed else
                "The KL term's gradient was not measured (`algo.kl_grad_every=0` in every job). ")
             + "Batches all tied: the share of steps whose every advantage was 0; updates and steps without an "
             "update: per job (optimizer steps taken; a skipped all-tied batch takes none).", "",
             markdown.table(shown[columns], digits=3), "",
             f"As CSV: {files.csv('tied_loss', by_arm)}"]
    return Section(text="\n".join(lines), files=files)
