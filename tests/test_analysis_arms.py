"""Any swept key ends in a report that names its arms by their real keys and values: dotted keys,
strings, floats, integers, lists, booleans, a key that is null in one job, two keys at once (synthetic
sweeps, one per kind of key); a sweep is its jobs once each (copies, stray entries, configs of another
shape); config values keep their types."""

import copy
import re
import shutil
import warnings

import pandas as pd
import pytest
from reference import both_pages

from analysis.data.load import load
from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

PROMPTS = prompt_pool(levels=("1", "2"), per_level=4)


def setting(cfg: dict, key: str, value: object) -> dict:
    """`cfg` with the dotted `key` set to `value`."""
    cfg = copy.deepcopy(cfg)
    *path, last = key.split(".")
    node = cfg
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    return cfg


def sweep_of(root, keys: dict[str, list], seeds=(0, 1)):
    """A synthetic sweep over every combination of `keys`' values, `seeds` each; 6 steps of 4 prompts."""
    configs = [job_config("fixed", group_size=4, seed=0, max_steps=6, prompts_per_step=4)]
    for key, values in keys.items():
        configs = [setting(cfg, key, v) for cfg in configs for v in values]
    configs = [{**cfg, "seed": s} for cfg in configs for s in seeds]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return write_sweep(root, configs, PROMPTS, eval_prompts=PROMPTS, eval_n=4)


def report_of(root) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return both_pages(build_report(root))


CASES = {  # key(s) -> (values swept, how the report names each)
    "float": ({"algo.beta": [0.0, 0.04]}, {"algo.beta": ["0.0", "0.04"]}),
    "string": ({"algo.loss_agg": ["sequence", "token"]}, {"algo.loss_agg": ["sequence", "token"]}),
    "alias": ({"rollout.temperature": [0.7, 1.0]}, {"rollout.temperature": ["0.7", "1.0"]}),
    "group size": ({"sampler.group_size": [4, 8]}, {"sampler.group_size": ["4", "8"]}),
    "list": ({"task.levels": [[1, 2], [1, 2, 3]]}, {"task.levels": ["[1, 2]", "[1, 2, 3]"]}),
    "null in one job": ({"algo.micro_batch_groups": [None, 2]}, {"algo.micro_batch_groups": ["2", "null"]}),
    "boolean": ({"algo.mask_truncated": [True, False]}, {"algo.mask_truncated": ["false", "true"]}),
    "two keys": ({"algo.lr": [1e-4, 2e-4], "sampler.name": ["fixed", "resample_on_tie"]},
                 {"sampler": ["fixed", "resample_on_tie"], "algo.lr": ["0.0001", "0.0002"]}),  # the choice first
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_section_names_the_arms_by_their_real_keys_and_values(tmp_path, case):
    swept, named = CASES[case]
    root = sweep_of(tmp_path / "sweep", swept)
    text = report_of(root)
    keys = list(named)
    arms = [", ".join(f"{k}={v}" for k, v in zip(keys, values)) for values in _product(named)]
    if len(keys) == 1:  # the header
        assert set(text.splitlines()[2].split(";")[0].split(" vs ")) == set(arms)
    assert f"Arms are told apart by: {', '.join(f'`{k}`' for k in keys)}" in text
    for section in ("## Tie persistence", "## Coverage after RL", "## Tests across seeds"):
        part = text[text.index(section):text.index("\n## ", text.index(section) + 1)]
        for arm in arms:
            assert arm in part, (section, arm)
    for key, values in named.items():
        assert f"- `{key}`: {', '.join(values)}" in text  # under Configs that vary
        assert not re.search(rf"{re.escape(key)}=(nan|None|–)\b", text)
    tables = root / "report" / "tables"
    for name in ("budget_by_arm", "persistence", "coverage_crossings", "heldout", "common_budget_tokens"):
        frame = pd.read_csv(tables / f"{name}.csv", dtype=str, keep_default_na=False)
        shown = {tuple(row) for row in frame[keys].itertuples(index=False, name=None)}
        assert shown == set(_product(named)), (name, shown)  # every arm, the null one too, by its name
    budget = pd.read_csv(tables / "budget_by_arm.csv", dtype=str, keep_default_na=False)
    assert budget["jobs"].astype(int).tolist() == [2] * len(arms)  # each arm its two seeds, none dropped


def _product(named: dict[str, list[str]]) -> list[tuple[str, ...]]:
    out = [()]
    for values in named.values():
        out = [(*prefix, v) for prefix in out for v in values]
    return out


def test_a_sweep_counts_each_run_once_and_names_everything_else(tmp_path):
    root = sweep_of(tmp_path / "sweep", {"algo.beta": [0.0, 0.04]}, seeds=(0,))
    before = report_of(root)
    shutil.copytree(root / "0", root / "0.bak")  # a backup: the same run id
    shutil.copytree(root / "1", root / "7")  # a stray copy under a job-like name
    (root / "notes").mkdir()
    (root / "notes.txt").write_text("what I ran")
    tables = load(root)
    assert tables.jobs["job"].tolist() == ["0", "1"]
    skipped = {s.name: s.reason for s in tables.skipped}
    assert skipped["0.bak"].startswith("a copy of job 0 (the same run id, 0,")
    assert skipped["7"].startswith("a copy of job 1 (the same run id, 1,")
    assert skipped["notes"].startswith("not a run") and skipped["notes.txt"].startswith("not a run")
    after = report_of(root)
    assert "2 jobs (1 seed per arm)" in after and "Jobs: 2 loaded, 4 jobs or parts skipped" in after
    assert "- `0.bak`: a copy of job 0" in after
    findings = before[before.index("## Findings"):before.index("<details>")]
    assert findings == after[after.index("## Findings"):after.index("<details>")]  # the same numbers


def test_a_config_of_another_shape_is_named_or_read_right(tmp_path):
    root = sweep_of(tmp_path / "sweep", {"algo.beta": [0.0, 0.04]}, seeds=(0, 1))
    config = root / "3" / ".hydra" / "config.yaml"
    config.write_text(re.sub(r"(?ms)^sampler:\n(  .*\n)+", "sampler: fixed\n", config.read_text()))
    (root / "3" / "config.json").unlink(missing_ok=True)
    tables = load(root)
    assert tables.jobs["job"].tolist() == ["0", "1", "2"]
    reason = {s.name: s.reason for s in tables.skipped}["3"]
    assert reason.startswith("its config has another shape: `sampler` is the plain value 'fixed' where 3 other jobs "
                             "have a mapping (sampler.band_hi, sampler.band_lo, sampler.group_size, ...)")
    assert "sampler=nan" not in report_of(root) and "sampler=null" not in report_of(root)
    alone = tmp_path / "alone"
    shutil.copytree(root / "3", alone)  # the same shape in every job: read as the sampler's name
    assert load(alone).jobs["sampler"].tolist() == ["fixed"]


def test_config_values_keep_their_types(tmp_path):
    root = sweep_of(tmp_path / "sweep", {"algo.beta": [0.0, 0.04]}, seeds=(0,))
    config = root / "1" / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("max_samples: null\n", ""))  # a key one job lacks
    jobs = load(root).jobs
    assert jobs["max_steps"].tolist() == [6, 6] and all(type(v) is int for v in jobs["max_steps"])
    text = report_of(root)
    assert "| max_steps | 6 |" in text
    # missing in one job, null in the other: one value, not a key that varies
    assert "- `max_samples`: null" not in text


SHOTS = [[["What is 2 + 3? Answer with the number alone, on a line of its own.", "5"],
          ["What is 7 + 8? Answer with the number alone, on a line of its own.", "15"]],
         [["Compute 4 * 6. Reply with the number only; no words, no units.", "24"],
          ["Compute 3 * 9. Reply with the number only; no words, no units.", "27"]]]


def test_a_long_value_is_named_by_a_short_label_and_given_whole_once(tmp_path):
    """A sweep over `task.shots` (lists of [user, assistant] turns, ~150 characters each): every sentence, table and
    CSV names an arm `task.shots=#<6 hex>`, the first digits of its text's SHA-256, and the provenance block gives
    each label's whole value once."""
    import hashlib

    from analysis.data.select import keep_jobs

    root = sweep_of(tmp_path / "sweep", {"task.shots": SHOTS})
    whole = list(dict.fromkeys(load(root).jobs["task.shots"].astype(str)))
    assert len(whole) == 2 and all(len(w) > 100 for w in whole)
    labels = ["#" + hashlib.sha256(w.encode()).hexdigest()[:6] for w in whole]
    text = report_of(root)
    assert set(text.splitlines()[2].split(";")[0].split(" vs ")) == {f"task.shots={lb}" for lb in labels}
    for w, label in zip(whole, labels):
        assert text.count(w) == 1 and f"| task.shots | {label} | {w} |" in text  # the legend, once
    assert f"- `task.shots`: {', '.join(sorted(labels))}" in text  # under Configs that vary
    budget = pd.read_csv(root / "report" / "tables" / "budget_by_arm.csv")
    assert sorted(budget["task.shots"]) == sorted(labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tables = load(root)
    for value in (labels[0], whole[0]):  # --where names an arm by its label, or by its whole value
        assert set(keep_jobs(tables, [f"task.shots={value}"]).jobs["task.shots"].astype(str)) == {whole[0]}
