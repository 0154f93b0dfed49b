"""What an arm's own rule fixes is never a finding, and what a report says of its jobs and figures holds for every
job: a tie rule's forced advantages and a sampler's cap are read from the groups table (not from arm names) and
counted two ways, as trained and comparably (a tied round pooled with a later mixed one is no rule); a job its
sampler stopped is named with the budget it reached; a window of first or last steps is each job's own; one step's
spike neither sets a health axis unsaid nor hides in it; a tie prediction is drawn only beside the groups it
predicts. Every sweep here is generated (fixtures/synthetic.py: the samplers' rules), then given what the rule under
test writes."""

import json
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from reference import report_lines

from analysis.data.load import load
from analysis.measures.construction import fixed_by_rule
from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

SEEDS = range(4)


def _build(root, out=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(root, out)


def _findings(report) -> list[str]:
    return report_lines(report)


def _rewrite(job_dir, change) -> None:
    """Each groups part of a job through `change(frame) -> frame`, written back with the part's column types (and
    any column `change` adds, typed as pandas gives it; `n_trained` and `unit` as the trainer writes them)."""
    for part in sorted((job_dir / "groups").glob("part-*.parquet")):
        table = pq.read_table(part)
        frame = change(table.to_pandas())
        fields = [table.schema.field(c) if c in table.schema.names else
                  pa.field(c, pa.int16() if c == "n_trained" else pa.int32() if c == "unit" else
                           pa.from_numpy_dtype(frame[c].dtype)) for c in frame.columns]
        pq.write_table(pa.Table.from_pandas(frame, schema=pa.schema(fields), preserve_index=False), part)


def _arms(root, names: list[str], per_arm: int) -> None:
    """The jobs' command lines chose a preset `arm=<name>` (jobs in arm order, `per_arm` seeds each)."""
    jobs = sorted((p for p in root.iterdir() if (p / "run.json").exists()), key=lambda p: int(p.name))
    for i, job in enumerate(jobs):
        seed = json.loads((job / "run.json").read_text())["seed"]
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"arm={names[i // per_arm]}", f"seed={seed}"]))


def _forced(frame: pd.DataFrame) -> pd.DataFrame:
    """A tie rule as NGRPO's: every sample of an all-wrong tied group gets a nonzero advantage."""
    wrong = (frame["tie_kind"] == "all_wrong").to_numpy()
    return frame.assign(n_informative=np.where(wrong, frame["group_size"], frame["n_informative"]).astype(np.int16))


def _capped(keep: int):
    """A cap as PODS's: of each group drawn, `keep` samples train (the max-variance subset of a mixed group keeps
    both kinds, so every kept sample of an untied group has a nonzero advantage)."""
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        tie = frame["tie"].to_numpy(bool)
        return frame.assign(n_trained=np.full(len(frame), keep, np.int16),
                            n_informative=np.where(tie, 0, keep).astype(np.int16))
    return change


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """Five arms of 4 seeds: grpo; `virtual`, the same draws as grpo (same sampler and seeds) under a tie rule its
    config names by no known word; `capped`, groups of 16 of which 8 train, its sampler named by no known word;
    dynamic sampling (no rule: it drops ties, which is the sampler, not a fixed share); and resample_on_tie with
    `pool=all` (no rule either: a tied round pooled with a later round that drew both kinds trains, as one larger
    group would, and whether a later round does is the policy's)."""
    root = tmp_path_factory.mktemp("rules") / "sweep"
    specs = [("grpo", "fixed", 8), ("virtual", "fixed", 8), ("capped", "fixed", 16), ("dynamic", "dynamic", 8),
             ("resample", "resample_on_tie", 8)]
    configs = []
    for _, sampler, size in specs:
        for seed in SEEDS:
            cfg = job_config(sampler, group_size=size, seed=seed, max_steps=16, prompts_per_step=8)
            configs.append(cfg)
    write_sweep(root, configs, prompt_pool(levels=("1", "2", "3"), per_level=12))
    for i in range(len(configs)):
        job, name = root / str(i), specs[i // len(SEEDS)][0]
        if name == "virtual":
            _rewrite(job, _forced)
        elif name == "capped":
            _rewrite(job, _capped(8))
    _arms(root, [name for name, _, _ in specs], len(SEEDS))
    return root


def _raw(root) -> pd.DataFrame:
    frames = [pd.read_parquet(job / "groups").assign(job=job.name) for job in root.iterdir() if job.is_dir()]
    return pd.concat(frames, ignore_index=True)


def test_a_rule_that_fixes_a_share_is_read_from_the_groups_and_counted_two_ways(rules):
    from analysis.measures.informative import comparable_per_job

    tables = load(rules, tables=("groups",), columns={"groups": ("step", "round", "group_size", "tie", "tie_kind",
                                                                 "used", "n_informative", "n_trained", "unit",
                                                                 "reward_mean", "prompt_id")})
    arm = ["arm"]
    groups = tables.groups.assign(arm=tables.groups["job"].astype(str).map(
        dict(zip(tables.jobs["job"].astype(str), tables.jobs["arm"]))))
    fixed = fixed_by_rule(tables.jobs, groups, arm)
    unranked = fixed.unranked()
    assert set(unranked) == {"arm=virtual", "arm=capped"}  # neither word is in any list: the data says it
    assert ("gives a nonzero advantage to samples of tied groups (all-wrong ties) whose training unit drew no other "
            "answer") in unranked["arm=virtual"]
    assert "trains 8 of the 16 samples it draws for a training unit, so at least 50% of its samples are wasted" \
        in unranked["arm=capped"]
    assert fixed.unranked_comparable() == {}  # both rank on the comparable count

    per_job = comparable_per_job(groups, arm).set_index("job")
    raw = _raw(rules)
    for job, rows in raw.groupby("job"):
        drawn = rows["group_size"].sum()
        # a plain recount, unit by unit: the samples of a unit (a step's rounds of one prompt) whose drawn answers
        # differ, where they trained (under a 0/1 reward every one has an advantage; a cap's left-out ones with them)
        spread = rows[rows["used"]].groupby(["step", "unit"])["n_correct"].transform(
            lambda c, r=rows: 0 < c.sum() < r.loc[c.index, "group_size"].sum())
        comparable = rows[rows["used"]].loc[spread.astype(bool), "group_size"].sum()
        assert per_job.loc[job, "comparable_per_1000"] == pytest.approx(1000 * comparable / drawn)
        assert per_job.loc[job, "trained_per_1000"] == pytest.approx(1000 * rows["n_informative"].sum() / drawn)
        untied = rows[~rows["tie"]]
        assert per_job.loc[job, "untied_per_1000"] == pytest.approx(1000 * untied["n_informative"].sum() / drawn)
    by_arm = per_job.groupby("arm")[["trained_per_1000", "comparable_per_1000", "untied_per_1000"]].mean()
    by_arm.index = "arm=" + by_arm.index.astype(str)
    # the tie rule draws what grpo draws: the same comparable count, more as trained
    assert by_arm.loc["arm=virtual", "comparable_per_1000"] == pytest.approx(
        by_arm.loc["arm=grpo", "comparable_per_1000"])
    assert by_arm.loc["arm=virtual", "trained_per_1000"] > by_arm.loc["arm=grpo", "trained_per_1000"] + 50
    # the cap: at most 500 as trained, while every sample of its groups with both kinds counts comparably
    assert by_arm.loc["arm=capped", "trained_per_1000"] <= 500 < by_arm.loc["arm=capped", "comparable_per_1000"]
    for name in ("grpo", "dynamic", "resample"):  # no rule: the two counts agree
        assert by_arm.loc[f"arm={name}", "comparable_per_1000"] == pytest.approx(
            by_arm.loc[f"arm={name}", "trained_per_1000"])
    # the pooled redraws trained tied rounds (so from untied groups alone it counts fewer), yet by no rule
    assert by_arm.loc["arm=resample", "untied_per_1000"] < by_arm.loc["arm=resample", "trained_per_1000"]
    for name, numbers in (("virtual", by_arm.loc["arm=virtual"]), ("capped", by_arm.loc["arm=capped"])):
        said = (f"{numbers['trained_per_1000']:,.0f} as trained, what its rule gave, and "
                f"{numbers['comparable_per_1000']:,.0f} comparable across arms")
        assert said in unranked[f"arm={name}"]


def test_a_share_a_rule_fixes_is_never_ranked_nor_a_finding(rules, tmp_path):
    report = _build(rules, tmp_path / "report")
    # ranked on the share counted alike for every arm (the tie rule's forced advantages and the cap left out)
    ranked = pd.read_csv(report.parent / "tables" / "ranking_informative.csv")
    assert set(ranked["arm"]) == {"arm=grpo", "arm=dynamic", "arm=resample", "arm=virtual", "arm=capped"}
    text = "\n".join(_findings(report))
    assert "virtual (" in text and "capped (" in text  # their as-trained shares: by construction, with both counts
    tests = pd.read_csv(report.parent / "tables" / "tests.csv")
    wasted = tests[tests["metric"] == "wasted_frac"]
    for _, row in wasted.iterrows():
        pair = {row["a"], row["b"]}
        virtual_less = "arm=virtual" in pair and (row["difference"] < 0) == (row["b"] == "arm=virtual")
        capped_more = "arm=capped" in pair and (row["difference"] > 0) == (row["b"] == "arm=capped")
        # a difference the rule makes (the tie rule wasting less, the cap more) is by construction; else a finding
        assert pd.notna(row["by_construction"]) == (virtual_less or capped_more), (row["a"], row["b"])


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Two arms of 3 seeds at a budget of 512 samples; job 4 (dynamic, seed 1) stopped by its sampler at step 10."""
    root = tmp_path_factory.mktemp("stopped") / "sweep"
    configs = [job_config(s, group_size=4, seed=seed, max_steps=16, prompts_per_step=8) for s in ("fixed", "dynamic")
               for seed in range(3)]
    for cfg in configs:
        cfg["max_samples"] = 512
    prompts = prompt_pool(levels=("1", "2"), per_level=8)
    write_sweep(root, configs, prompts, stop_steps=[16, 16, 16, 16, 10, 16], eval_prompts=prompts, eval_n=4)
    record = json.loads((root / "4" / "run.json").read_text())
    record["stopped"] = ("dynamic sampler: 8 generation rounds (sampler.dynamic.max_rounds) found only 3 of 8 "
                         "untied groups; the prompts are too easy or too hard. Stopped at step 10; the tables so far "
                         "are whole.")
    (root / "4" / "run.json").write_text(json.dumps(record))
    return root


def test_a_job_its_sampler_stopped_is_named_with_the_budget_it_reached(stopped, tmp_path):
    report = _build(stopped, tmp_path / "report")
    drawn = pq.read_table(stopped / "4" / "groups", columns=["samples_total"])["samples_total"].to_numpy().max()
    line = next(f for f in _findings(report) if f.startswith("**Stopped by their sampler**"))
    assert "1 job marked done ended before its budget (dynamic: `4` (seed 1)" in line
    assert f"at {drawn:,} of 512 samples" in line
    details = (report.parent / "DETAILS.md").read_text()
    jobs = details[details.index("### Stopped by their sampler"):details.index("### Not marked done")]
    assert (f"- `4` (sampler dynamic, seed 1): stopped at {drawn:,} of its 512 samples ({drawn / 512:.0%}) at step 10. "
            "dynamic sampler: 8 generation rounds") in jobs
    assert "`0`" not in jobs  # only the stopped job
    text = report.read_text()
    assert "Every job is done and its final checkpoint is its last training step." not in text
    assert "1 of them (`4`) stopped by their sampler before their budget" in text


def test_a_sweep_no_sampler_stopped_says_nothing_of_stops(tmp_path):
    configs = [job_config("fixed", group_size=4, seed=seed, max_steps=6, prompts_per_step=4) for seed in range(2)]
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=4))
    text = _build(root, tmp_path / "report").read_text()
    assert "Stopped by their sampler" not in text and "stopped by their sampler" not in text


def test_first_and_last_steps_are_each_jobs_own(tmp_path):
    """Two seeds of one arm, one trained 40 steps and one 20: the last 4 steps are 37-40 of the first and 17-20
    of the second (not the sweep's 37-40, which the second never reached), and the row says which."""
    from analysis.measures.ties import all_wrong_split

    prompts = pd.DataFrame({"prompt_id": [f"L1-{i}" for i in range(16)], "difficulty": "1", "p": 0.05, "q": 0.5})
    configs = [job_config("fixed", group_size=4, seed=seed, max_steps=40, prompts_per_step=8) for seed in (0, 1)]
    root = write_sweep(tmp_path / "sweep", configs, prompts, stop_steps=[40, 20])
    g = pd.concat([pd.read_parquet(root / str(j) / "groups").assign(job=str(j)) for j in (0, 1)], ignore_index=True)
    split = all_wrong_split(g, [], window=4).set_index(["difficulty", "phase"])
    wrong = g[(g["round"] == 0) & (g["n_correct"] == 0)]
    last = wrong[((wrong["job"] == "0") & (wrong["step"] > 36)) | ((wrong["job"] == "1") & (wrong["step"] > 16))]
    assert split.loc[("1", "last"), "all_wrong"] == len(last) and (last["job"] == "1").any()
    assert split.loc[("1", "last"), "steps"] == "17–20 to 37–40"
    assert split.loc[("1", "first"), "steps"] == "1–4"
    assert split.loc[("1", "first"), "all_wrong"] == len(wrong[wrong["step"] <= 4])


def test_a_spike_is_named_and_sets_no_axis(tmp_path):
    """One step of one job with a KL and a gradient norm a hundred times its arm's: the health section names the
    job, step and value, and the panels stop at the highest point of any curve without it, the spike marked at the
    edge (a job of 30 steps: its curve is its steps' values)."""
    from analysis.measures.health import HEADROOM, spikes

    configs = [job_config(s, group_size=4, seed=seed, max_steps=30, prompts_per_step=4)
               for s in ("fixed", "resample_on_tie") for seed in range(2)]
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=8))
    rng = np.random.default_rng(0)
    for job in range(4):
        for part in sorted((root / str(job) / "steps").glob("*.parquet")):
            table = pq.read_table(part).to_pandas()
            step = int(table["step"].iloc[0])
            kl = rng.uniform(0.01, 0.2) * (1 + step / 30)
            grad = rng.uniform(0.5, 1.5)
            if job == 2 and step == 17:
                kl, grad = 40.0, 150.0
            table = table.assign(kl=kl, grad_norm=grad)
            pq.write_table(pa.Table.from_pandas(table, preserve_index=False), part)
    report = _build(root, tmp_path / "report")
    details = (report.parent / "DETAILS.md").read_text()
    health = details[details.index("## Training health"):]
    health = health[:health.index("\n## ")] if "\n## " in health else health
    assert "**Spikes**" in health
    assert "KL: job 2 (resample_on_tie) step 17: 40," in health
    assert "gradient norm: job 2 (resample_on_tie) step 17: 150," in health
    steps = load(root, tables=("steps",)).steps
    others = steps[~((steps["job"].astype(str) == "2") & (steps["step"] == 17))]
    for metric in ("kl", "grad_norm"):
        top = HEADROOM * others[metric].max()
        assert f"its panel's axis stops at {top:.3g}" in health
    found = spikes(steps.assign(sampler=steps["job"].astype(str).map({"0": "a", "1": "a", "2": "b", "3": "b"})),
                   ["sampler"])
    assert set(zip(found["job"], found["step"], found["metric"])) == {("2", 17, "kl"), ("2", 17, "grad_norm")}
    assert (report.parent / "figures" / "health.png").is_file()


def test_a_quiet_run_has_no_spikes_and_its_axes_are_its_own():
    from analysis.measures.health import axis_tops, spikes

    steps = pd.DataFrame({"job": np.repeat(["0", "1"], 40), "step": np.tile(np.arange(1, 41), 2),
                          "arm": "a", "samples_total": np.tile(np.arange(1, 41) * 32, 2),
                          "kl": np.linspace(0.01, 0.3, 80), "grad_norm": np.random.default_rng(1).uniform(0.5, 2, 80)})
    found = spikes(steps, ["arm"])
    assert found.empty and axis_tops(steps, found, ["arm"]) == {}


def test_a_prediction_is_drawn_only_beside_the_groups_it_predicts(tmp_path):
    """An SPO-like arm: groups of 8 at its first step (which a prediction can cover), then groups of one answer
    (which never tie and have none). Its prediction covers a sliver of its bar's groups: not drawn beside it, and
    the caption names the arm with both counts; the plain arm's prediction stays."""
    from dataclasses import replace

    from analysis.data.arms import arms_as_text
    from analysis.render import ties as render_ties
    from analysis.render.canvas import report_colours
    from analysis.sections.section import Context
    from analysis.sections.ties import section as ties_section

    configs = [job_config("fixed", group_size=8, seed=seed, max_steps=12, prompts_per_step=8) for seed in range(4)]
    configs += [job_config("fixed", group_size=8, seed=seed, max_steps=12, prompts_per_step=8) for seed in range(4)]
    root = write_sweep(tmp_path / "sweep", configs, prompt_pool(levels=("1", "2"), per_level=8))

    def single(frame: pd.DataFrame) -> pd.DataFrame:
        if int(frame["step"].iloc[0]) <= 2:  # its first steps: groups of 8, some on prompts seen again
            return frame
        rows = []
        for r in frame.itertuples(index=False):
            for c in r.correct:
                rows.append({**r._asdict(), "group_size": 1, "rewards": [float(c)], "correct": [bool(c)],
                             "reward_mean": float(c), "reward_std": 0.0, "n_correct": int(c), "tie": False,
                             "tie_kind": None, "n_informative": 1})
        return pd.DataFrame(rows, columns=frame.columns)

    for job in range(4, 8):
        _rewrite(root / str(job), single)
    _arms(root, ["grpo", "single"], 4)
    tables = load(root, tables=("groups",))
    tables = replace(tables, groups=arms_as_text(tables.groups, tables.jobs, ["arm"], tables.own.get("groups", ())))
    colours = report_colours(tables.jobs, ["arm"])
    made = ties_section(tables, Context(root=root, out=tmp_path / "out", arm=("arm",), names={}, colours=colours))
    drawn = made.files.figures["ties_by_difficulty"].args[0]
    apart = render_ties.predicted_apart(drawn).to_numpy()
    single_rows = (drawn["arm"].astype(str) == "single").to_numpy()
    predicted = drawn["predicted_tie_frac"].notna().to_numpy()
    assert (single_rows & predicted).any()  # the tables have its prediction (of its groups of 8)...
    assert not (single_rows & predicted & ~apart).any()  # ...which the figure does not draw beside the bar
    assert (predicted & ~apart)[~single_rows].all()  # every other arm's is drawn
    raw = _raw(root)
    raw = raw[raw["round"] == 0]
    caption = made.text[made.text.index("### First-round ties by difficulty"):made.text.index("![ties_by_difficulty]")]
    levels = drawn.loc[single_rows & predicted, "difficulty"].astype(str).tolist()
    mine = raw[(raw["job"].astype(int) >= 4) & raw["difficulty"].astype(str).isin(levels)]
    assert ("No prediction is drawn beside a bar or point most of whose groups no prediction can cover (groups of "
            f"one answer, which never tie): single ({(mine['group_size'] >= 2).sum():,} of its {len(mine):,} "
            f"first-round groups at difficulty {', '.join(levels)}) have two answers or more") in caption
    over = made.files.figures["ties_over_samples"].args[0]
    late = render_ties.predicted_apart(over).to_numpy() | over["predicted_tie_frac"].isna().to_numpy()
    assert late[(over["arm"].astype(str) == "single").to_numpy()].all()  # no diamond of it over training either
    made.files.figures["ties_by_difficulty"](tmp_path / "ties_by_difficulty.png")
    assert (tmp_path / "ties_by_difficulty.png").is_file()
