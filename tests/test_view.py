"""The viewer's data (analysis/view/data.py) against recounts from the run's own tables, its sample rule, its
escaping and its writer. The page in a real browser: tests/test_view_browser.py."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis.view import ViewNotWritable, build_view
from analysis.view.data import HELD_OUT, TRAIN, collect
from analysis.view.page import embed, render
from grpo_lab.config import TrainConfig
from grpo_lab.rewards.rules import final_answer
from grpo_lab.run.tables import read_table
from grpo_lab.tasks import build_task
from grpo_lab.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["<script>window.__pwned = 1</script>", "</script><script>window.__pwned = 2</script>",
           '<img src=x onerror="window.__pwned = 3">', '<a href="javascript:window.__pwned = 4">click</a>',
           "<!-- x --> & \u2028 \u2029 ]]>"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, TrainConfig]:
    """A real tiny run that keeps 8 replies a step (two groups of 4) and evaluates its base model."""
    out = tmp_path_factory.mktemp("view") / "run"
    cfg = TrainConfig(out_dir=str(out), max_steps=4, prompts_per_step=6, checkpoint_every=2, log_completions=8)
    cfg.task.levels = [1, 3, 4]
    cfg.task.train_per_level = 8
    cfg.task.eval_per_level = 4
    cfg.sampler.group_size = 4
    cfg.eval.n = 4
    train(cfg)
    return out, cfg


def frame(payload: dict) -> pd.DataFrame:
    g = payload["groups"]
    return pd.DataFrame({k: g[k] for k in ("job", "step", "prompt", "difficulty", "round", "kind", "src", "text",
                                           "tokens", "truncated", "answered", "used")})


def test_every_group_is_on_the_page_with_what_its_table_recorded(run):
    out, _ = run
    payload = collect(out)
    groups = read_table(out, "groups").to_pandas()
    shown = frame(payload)
    train_rows = shown[shown["src"] == TRAIN].reset_index(drop=True)
    assert payload["sample"]["whole"] and len(train_rows) == len(groups)
    assert train_rows["step"].tolist() == groups["step"].tolist()
    assert train_rows["prompt"].tolist() == groups["prompt_id"].tolist()
    # the kind, recounted from the rewards themselves (population std 0 = tie; then which answers were right)
    rewards = groups["rewards"].map(np.asarray)
    tied = rewards.map(lambda r: r.std() == 0)
    right = groups["correct"].map(lambda c: np.asarray(c).all())
    wrong = groups["correct"].map(lambda c: not np.asarray(c).any())
    truth = np.where(~tied, "mixed", np.where(right, "all_correct", np.where(wrong, "all_wrong", "other")))
    assert train_rows["kind"].tolist() == truth.tolist()
    assert payload["groups"]["advantages"][: len(groups)] == [
        [round(float(a), 4) for a in adv] for adv in groups["advantages"]]
    assert train_rows["truncated"].tolist() == groups["truncated"].tolist()
    assert train_rows["answered"].tolist() == groups["n_answered"].tolist()


def test_kept_replies_join_their_groups_with_answer_tokens_and_reference(run):
    out, cfg = run
    payload = collect(out)
    shown = frame(payload)
    groups = read_table(out, "groups").to_pandas()
    gold = {p.prompt_id: p.answer for p in (lambda t: t.train + t.held_out)(build_task(cfg.task))}
    kept = read_table(out, "completions").to_pandas()
    texted = shown[(shown["text"] >= 0) & (shown["src"] == TRAIN)]
    assert len(texted) == kept.groupby(["step", "group"]).ngroups > 4  # log_completions=8: two groups a step
    for i, row in texted.iterrows():
        replies = payload["replies"][row["text"]]
        assert replies["gold"] == gold[row["prompt"]]
        assert [s["reward"] for s in replies["samples"]] == payload["groups"]["rewards"][i]
        # whole groups: their replies' tokens add up to the group's, recorded apart in the groups table
        assert sum(s["tokens"] for s in replies["samples"]) == groups["tokens"].iloc[i] == row["tokens"]
        assert sum(s["truncated"] for s in replies["samples"]) == row["truncated"]
        for s in replies["samples"]:
            assert s["answer"] == final_answer(s["text"], cfg.task.answer_format)
            assert s["answered"] == (s["answer"] is not None)
    held = shown[shown["src"] == HELD_OUT]
    assert len(held) == len(cfg.task.levels)  # the base evaluation keeps replies of each difficulty
    for _, row in held.iterrows():
        replies = payload["replies"][row["text"]]
        assert row["step"] == 0 and replies["prompt"] and replies["gold"] == gold[row["prompt"]]


def test_the_heatmap_recounts_first_round_ties_from_the_groups_table(run):
    out, _ = run
    heat = collect(out)["heat"]
    groups = read_table(out, "groups").to_pandas()
    first = groups[groups["round"] == 0]
    (arm,) = heat["arms"]
    for r, d in enumerate(heat["difficulties"]):
        for c, (lo, hi) in enumerate(heat["bins"]):
            cell = first[(first["difficulty"] == d) & first["step"].between(lo, hi)]
            got = heat["arms"][arm][r][c]
            if cell.empty:
                assert got is None
                continue
            tied = cell["rewards"].map(lambda x: np.std(x) == 0)
            assert got == [len(cell), int(tied.sum()), int((tied & (cell["n_correct"] == cell["group_size"])).sum()),
                           int((tied & (cell["n_correct"] == 0)).sum())]


def test_a_sample_keeps_every_replied_group_and_whole_prompts_across_jobs_and_is_the_same_twice():
    data = ROOT / "reports" / "main" / "data"
    payload = collect(data, max_groups=3_000)
    again = collect(data, max_groups=3_000)
    assert payload["groups"] == again["groups"] and not payload["sample"]["whole"]
    whole = collect(data, max_groups=10**7)
    full, part = frame(whole), frame(payload)
    assert whole["sample"]["whole"] and len(full) == payload["sample"]["total"]
    # every group with replies is kept
    assert (part["text"] >= 0).sum() == (full["text"] >= 0).sum()
    # units are whole: each (step, prompt, source) on the page has every one of its groups, in every job
    units = lambda f: f.groupby(["step", "prompt", "src"]).size()  # noqa: E731
    on_page = units(part)
    assert on_page.equals(units(full).loc[on_page.index])
    untexted = full[~full.set_index(["step", "prompt", "src"]).index.isin(
        full[full["text"] >= 0].set_index(["step", "prompt", "src"]).index)]
    assert len(part) - (len(full) - len(untexted)) <= 3_000
    assert len(part) > 2_000  # and it fills its budget
    assert "3,000" in payload["sample"]["rule"] and f"{len(part):,} of {len(full):,}" in payload["sample"]["rule"]


def test_hostile_text_is_inert_json_in_the_page():
    payload = {"title": "</title><script>x</script>", "texts": HOSTILE}
    text = embed(payload)
    assert not re.search(r"[<>&\u2028\u2029]", text)
    assert json.loads(text) == payload
    page = render({"title": HOSTILE[0], "source": "s", "arm_keys": [], "jobs": [], "arms": [],
                   "sample": {"whole": True, "rule": "", "shown": 0, "total": 0, "train_total": 0,
                              "held_out_total": 0}, "groups": {}, "replies": [{"samples": HOSTILE}],
                   "heat": {"bins": [], "difficulties": [], "arms": {}}})
    tags = _start_tags(page)
    assert tags.count("script") == 2  # the data block and the page's own script: nothing the text opened
    assert "img" not in tags and "a" not in tags
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page)  # nothing to fetch; the SVG namespace only


def _start_tags(page: str) -> list[str]:
    """Every element a browser's tokenizer starts in `page` (a script block's content is text to it)."""
    from html.parser import HTMLParser

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found = []

        def handle_starttag(self, tag, attrs):
            self.found.append(tag)

    parser = Tags()
    parser.feed(page)
    return parser.found


def test_the_writer_refuses_what_it_did_not_write(run, tmp_path):
    out, _ = run
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    with pytest.raises(ViewNotWritable, match="not a page this viewer wrote"):
        build_view(out, mine)
    assert mine.read_text() == "<html>my notes</html>"
    link = tmp_path / "link.html"
    link.symlink_to(mine)
    with pytest.raises(ViewNotWritable, match="symbolic link"):
        build_view(out, link)
    with pytest.raises(ViewNotWritable, match="no folder"):
        build_view(out, tmp_path / "absent" / "v.html")
    page = build_view(out, tmp_path / "v.html")
    assert build_view(out, page) == page  # its own page it replaces
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_command_line_writes_beside_the_data_and_says_errors_in_one_line(run, tmp_path, capsys):
    from analysis.view.__main__ import main

    out, _ = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    assert main([str(copy)]) == 0
    assert (copy / "viewer.html").read_text().startswith("<!DOCTYPE html>")
    assert main([str(tmp_path / "nothing")]) == 2
    assert main([str(copy), "--max-groups", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no such directory" in err[0] and "--max-groups 0" in err[1]


def test_a_report_folder_is_read_through_its_data_and_the_page_goes_beside_it(tmp_path):
    report = tmp_path / "report"
    shutil.copytree(ROOT / "reports" / "main" / "data", report / "data")
    (report / "REPORT.md").write_text("# a report\n")
    page = build_view(report, max_groups=500)
    assert page == report / "viewer.html"
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page.read_text(),
                                re.S).group(1))
    assert data["title"] == "report" and len(data["jobs"]) == sum(p.is_dir() for p in (report / "data").iterdir())
    assert pq.read_schema(next((report / "data").glob("*/groups/part-*.parquet")))  # the data is untouched


def test_a_report_built_with_the_viewer_links_it_and_owns_it(run, tmp_path):
    from analysis.render.ownership import MARKER
    from analysis.report import build_report

    out, _ = run
    report = tmp_path / "report"
    build_report(out, report, viewer=True)
    assert "[viewer.html](viewer.html)" in (report / "REPORT.md").read_text()
    assert "viewer.html" in json.loads((report / MARKER).read_text())["files"]
    assert embedded_title(report / "viewer.html") == "report"
    build_report(out, report)  # without it: the build's own page goes with its link
    assert not (report / "viewer.html").exists() and "viewer.html" not in (report / "REPORT.md").read_text()
    build_view(out, report / "viewer.html")  # a page written beside the report by hand is kept by a rebuild
    build_report(out, report)
    assert (report / "viewer.html").exists()
    build_report(out, report, viewer=True)  # and replaced by a build that writes its own
    assert "viewer.html" in json.loads((report / MARKER).read_text())["files"]


def embedded_title(page: Path) -> str:
    text = page.read_text()
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
                      .group(1))["title"]


def _logged_trl(folder: Path) -> pd.DataFrame:
    files = sorted((folder / "completions").glob("completions_*.parquet"))
    return pd.concat([pd.read_parquet(p) for p in files], ignore_index=True)


@pytest.mark.parametrize("tool", ["trl", "open_instruct", "nemo_rl"])
def test_a_run_of_another_tool_views_every_group_with_its_replies_and_advantages(tmp_path, tool):
    """A plain TRL run, open-instruct traces and NeMo-RL dumps, made in each tool's format, ingested: every group on
    the page has its replies, and the (step, reward, advantage) of every reply recount from the logs."""
    from analysis.ingest import Reading, ingest
    from fixtures.synthetic import job_config, prompt_pool, simulate_groups
    from fixtures.tool_logs import nemo_rl_dumps, open_instruct_traces, trl_export

    prompts = prompt_pool(levels=("1", "2", "3"), per_level=8)
    if tool == "trl":
        cfg = job_config("fixed", group_size=4, seed=1, max_steps=5, prompts_per_step=6)
        source = trl_export(simulate_groups(prompts, cfg, "run-0").to_pandas(), tmp_path / "trl")
        for path in (source / "completions").glob("*.parquet"):  # log_completions=True and nothing more
            pd.read_parquet(path).drop(columns=["completion_tokens", "level"]).to_parquet(path)
        logged = _logged_trl(source).rename(columns={"accuracy": "reward"})
        truth = list(zip(logged["step"], logged["reward"], logged["advantage"].round(4), logged["completion"]))
        reading = Reading()
    elif tool == "open_instruct":
        source = open_instruct_traces(tmp_path / "oi", prompts, steps=5, batch=6, n=4, filter_zero_std=False)
        lines = pd.DataFrame([json.loads(x) for p in sorted(source.glob("*_rollouts_*.jsonl"))
                              for x in p.read_text().splitlines()])
        truth = list(zip(lines["step"] + 1, lines["reward"], lines["advantage"].round(4)))
        reading = Reading(correct_at=10)
    else:
        source = nemo_rl_dumps(tmp_path / "logs" / "exp_001", prompts, None, steps=5, batch=6, n=4)
        rows = [(int(p.stem.rsplit("step", 1)[1]), json.loads(x)) for p in source.glob("train_data_step*.jsonl")
                for x in p.read_text().splitlines()]
        truth = [(step, r["rewards"][0], round(float(np.mean(
            [a for a, m in zip(r["advantages"][0], r["token_loss_mask"][0]) if m])), 4), r["content"][0][1])
            for step, r in rows]
        reading = Reading()
    run = ingest(tool, source, tmp_path / "run", reading)
    payload = collect(run)
    g = payload["groups"]
    assert payload["sample"]["whole"] and all(t >= 0 for t in g["text"])
    got = []
    for i, t in enumerate(g["text"]):
        replies = payload["replies"][t]["samples"]
        assert [s["reward"] for s in replies] == g["rewards"][i] and len(g["advantages"][i]) == len(replies)
        for s, a in zip(replies, g["advantages"][i]):
            got.append((g["step"][i], s["reward"], a) + ((s["text"],) if tool != "open_instruct" else ()))
    assert sorted(got) == sorted(tuple(x[:len(got[0])]) for x in truth)
    page = build_view(run, tmp_path / "v.html")
    assert embedded_title(page) == "run"
