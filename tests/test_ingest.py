"""Other tools' logs read into grpo-lab's tables (`python -m analysis.ingest`): verl dumps written by verl's rules and
a grpo-lab run exported to TRL's format, each recounted from the raw files with plain pandas; every malformed input a
one-line error naming file:line before anything is written; the output folder written only where it is the
ingest's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.data.load import load
from analysis.ingest import IngestError, Reading, ingest
from analysis.ingest.tables import pass_rate_bin, prompt_id
from analysis.measures.ties import tie_fractions
from fixtures.synthetic import job_config, prompt_pool, simulate_groups, write_run
from fixtures.tool_logs import read_jsonl, read_parts, trl_export, verl_rows, verl_run, write_verl

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = prompt_pool(levels=("1", "2", "3"), per_level=8)
HELD_OUT = prompt_pool(levels=("1", "2", "3"), per_level=4, seed=1).assign(
    prompt_id=lambda d: "H" + d["prompt_id"])
VERL = Reading(difficulty_from="level", correct_from="acc", tokens_from="response_length", answer_from="pred")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis.ingest", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("uid", [True, False], ids=["uid", "input text"])
def test_a_verl_dump_recounts_from_its_jsonl(tmp_path, uid):
    """Groups by uid (or by input text where the dump has none), rows reordered as balance_batch does: every
    group's rewards, tie and kind, per step and difficulty, recount from the raw lines; eval rows too."""
    rollouts, validation = verl_run(tmp_path / "verl", PROMPTS, HELD_OUT, steps=6, batch=6, n=4, uid=uid)
    out = ingest("verl", rollouts, tmp_path / "run", VERL, validation=validation)
    groups = read_parts(out, "groups")
    raw = read_jsonl(rollouts)
    key = ["step", "uid"] if uid else ["step", "input"]
    truth = raw.groupby(key, sort=False).agg(level=("level", "first"), n=("score", "size"),
                                             spread=("score", lambda s: s.max() - s.min()), right=("acc", "sum"),
                                             tokens=("response_length", "sum"))
    truth["tie"] = truth["spread"] == 0
    assert len(groups) == len(truth) and (truth["n"] == 4).all()
    for step in range(1, 7):  # ties per step and difficulty: the ingest's against the recount
        ours = groups[groups["step"] == step].groupby("difficulty")["tie"].agg(["sum", "size"])
        theirs = truth.loc[step].groupby("level")["tie"].agg(["sum", "size"])
        pd.testing.assert_frame_equal(ours, theirs, check_names=False, check_dtype=False)
    kinds = groups["tie_kind"].fillna("mixed").value_counts().to_dict()
    assert kinds == {**{k: v for k, v in {
        "all_correct": int((truth["tie"] & (truth["right"] == 4)).sum()),
        "all_wrong": int((truth["tie"] & (truth["right"] == 0)).sum()),
        "mixed": int((~truth["tie"]).sum())}.items() if v}}
    assert groups["samples_total"].iloc[-1] == len(raw)
    assert groups["tokens_total"].iloc[-1] == raw["response_length"].sum()
    # held-out: pass@1 per step and difficulty is the mean of `acc`; the answer is `pred`
    evals = read_parts(out, "eval")
    val = read_jsonl(validation)
    assert len(evals) == len(val) and set(evals["n"]) == {4}
    ours = evals.groupby(["step", "difficulty"])["correct"].mean()
    theirs = val.groupby(["step", "level"])["acc"].mean()
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy())
    assert sorted(evals["answer"].dropna()) == sorted(val["pred"].dropna())
    assert evals.loc[evals["step"] == 0, "samples_total"].eq(0).all()
    drawn = groups.groupby("step")["samples_total"].max()
    assert (evals.loc[evals["step"] == 6, "samples_total"] == drawn[6]).all()
    # the ids are the prompts' texts hashed: the same prompt has one id in every run
    assert set(groups["prompt_id"]) == {prompt_id(t) for t in raw["input"]}


def test_continuous_rewards_tie_on_zero_spread_and_pass_rate_bins_name_difficulty(tmp_path):
    """Scores in [0, 1]: a group ties when every score is equal (tied at 0.5 with samples correct at 0.4 and above:
    all correct), and without a difficulty field each prompt is binned by its first group's pass rate, by
    grpo-lab's bins."""
    rng = np.random.default_rng(3)
    steps = {}
    for step in (1, 2, 3):
        rows = verl_rows(PROMPTS, step, 4, rng, batch=6)
        for row in rows:
            row["score"] = 0.5 if row["uid"].endswith(("1", "2", "3")) else round(float(rng.random()), 3)
        steps[step] = rows
    dump = write_verl(tmp_path / "dump", steps)
    out = ingest("verl", dump, tmp_path / "run", Reading(correct_at=0.4, tokens_from="response_length"))
    groups = read_parts(out, "groups")
    raw = read_jsonl(dump)
    truth = raw.groupby(["step", "uid"], sort=False)["score"].agg(lambda s: s.nunique() == 1)
    assert groups["tie"].tolist() == truth.tolist() and truth.any()
    tied = groups[groups["tie"]]
    assert (tied["tie_kind"] == "all_correct").all() and (tied["reward_mean"] == 0.5).all()
    first = raw.assign(right=raw["score"] >= 0.4)
    first = first[first["step"] == first.groupby("input")["step"].transform("min")]
    bins = first.groupby("input")["right"].mean().map(pass_rate_bin)
    assert dict(zip(groups["prompt_id"], groups["difficulty"])) == {prompt_id(k): v for k, v in bins.items()}


def test_a_grpo_lab_run_exported_to_trl_and_read_back_has_the_same_tie_tables(tmp_path):
    cfg = job_config("fixed", group_size=8, seed=2, max_steps=12, prompts_per_step=6)
    groups = simulate_groups(PROMPTS, cfg, "run-0")
    original = write_run(tmp_path / "original", cfg, {"groups": groups})
    trl_export(groups.to_pandas(), tmp_path / "trl")
    back = ingest("trl", tmp_path / "trl", tmp_path / "back",
                  Reading(difficulty_from="level", correct_from="accuracy"))
    a, b = load(original).groups, load(back).groups
    columns = ["step", "difficulty", "group_size", "n_correct", "tie", "tie_kind", "tokens", "samples_total",
               "tokens_total"]
    pd.testing.assert_frame_equal(a[columns].astype(str), b[columns].astype(str))
    for table_a, table_b in ((tie_fractions(a, by=("group_size",)), tie_fractions(b, by=("group_size",))),
                             (tie_fractions(a, by=("group_size",), window=3),
                              tie_fractions(b, by=("group_size",), window=3))):
        pd.testing.assert_frame_equal(table_a, table_b)


def test_trl_reward_weights_are_checked_against_the_logged_advantages(tmp_path):
    """Two reward functions summed with weights 1 and 0.5: read with the default weights, the advantages TRL
    logged do not follow from the sum, and the ingest says so; with the right weights the ties are the sum's."""
    cfg = job_config("fixed", group_size=4, seed=1, max_steps=4, prompts_per_step=6)
    trl = trl_export(simulate_groups(PROMPTS, cfg, "run-0").to_pandas(), tmp_path / "trl")
    rng = np.random.default_rng(0)
    for path in sorted((trl / "completions").glob("*.parquet")):
        frame = pd.read_parquet(path)
        frame.insert(4, "format", rng.choice([0.0, 1.0], len(frame), p=[0.3, 0.7]))
        total = frame["accuracy"] + 0.5 * frame["format"]
        group = np.arange(len(frame)) // 4
        mean, std = total.groupby(group).transform("mean"), total.groupby(group).transform("std")
        frame["advantage"] = (total - mean) / (std + 1e-4)
        frame.to_parquet(path)
    with pytest.raises(IngestError, match=r"completions_00001.parquet:row \d+: the logged advantages .* weights "
                                          r"accuracy=1, format=1"):
        ingest("trl", trl, tmp_path / "wrong", Reading(correct_from="accuracy"))
    assert not (tmp_path / "wrong").exists()
    out = ingest("trl", trl, tmp_path / "right", Reading(correct_from="accuracy"), reward_weights=[1, 0.5])
    groups = read_parts(out, "groups")
    frames = pd.concat([pd.read_parquet(p) for p in sorted((trl / "completions").glob("*.parquet"))])
    total = (frames["accuracy"] + 0.5 * frames["format"]).to_numpy().reshape(-1, 4)
    assert groups["tie"].tolist() == [bool(len(set(r)) == 1) for r in total]
    assert [list(r) for r in groups["rewards"]] == [list(np.float32(r)) for r in total]
    assert [list(r) for r in groups["rewards_format"]] == frames["format"].to_numpy().reshape(-1, 4).tolist()


def test_a_generation_logged_again_counts_once(tmp_path):
    """TRL logs its last generation at every logging step: with num_iterations=2 step 2's file repeats step 1's."""
    cfg = job_config("fixed", group_size=4, seed=1, max_steps=3, prompts_per_step=4)
    trl = trl_export(simulate_groups(PROMPTS, cfg, "run-0").to_pandas(), tmp_path / "trl")
    files = trl / "completions"
    logged = {s: pd.read_parquet(files / f"completions_{s:05d}.parquet") for s in (1, 2, 3)}
    for path in files.iterdir():
        path.unlink()
    for step in range(1, 6):  # generations at steps 1, 3, 5; steps 2 and 4 log the one before again
        logged[(step + 1) // 2].assign(step=step).to_parquet(files / f"completions_{step:05d}.parquet")
    out = ingest("trl", trl, tmp_path / "run", Reading(correct_from="accuracy"))
    groups = read_parts(out, "groups")
    assert sorted(set(groups["step"])) == [1, 3, 5] and len(groups) == 12
    how = json.loads((out / "run.json").read_text())["imported"]["how"]
    assert how["repeats"].startswith("2 files repeated the generation logged before them")


def _dump_with(tmp_path: Path, edit) -> Path:
    rng = np.random.default_rng(0)
    steps = {s: verl_rows(PROMPTS, s, 4, rng, batch=3) for s in (1, 2, 3)}
    edit(steps)
    return write_verl(tmp_path / "dump", steps)


def _drop_score(steps):
    del steps[2][5]["score"]


def _unequal(steps):
    del steps[3][7]


def _duplicate_prompt(steps):  # the same prompt twice in a batch, no uid: one group of twice the size
    for rows in steps.values():
        for row in rows:
            row.pop("uid")
    text = steps[2][0]["input"]
    for row in steps[2]:
        if row["input"] != text:
            row["input"] = text
            break


def _string_score(steps):
    steps[1][2]["score"] = "1.0"


BAD = {  # name -> (edit, what the one line says, with its file:line)
    "missing score": (_drop_score, r"dump/2\.jsonl:6: no 'score'"),
    "unequal group": (_unequal, r"dump/3\.jsonl:\d+: a group of 3 completions where the run's groups have 4"),
    "one prompt twice": (_duplicate_prompt, r"dump/2\.jsonl:\d+: a group of (5|3) completions where the run's"),
    "score not a number": (_string_score, r"dump/1\.jsonl:3: score '1\.0' is not a finite number"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_dump_is_one_line_naming_file_and_line_and_writes_nothing(tmp_path, case):
    edit, says = BAD[case]
    dump = _dump_with(tmp_path, edit)
    with pytest.raises(IngestError, match=says):
        ingest("verl", dump, tmp_path / "run", Reading(tokens_from="response_length"))
    assert not (tmp_path / "run").exists()


def test_the_command_line_says_a_malformed_line_in_one_line(tmp_path):
    dump = _dump_with(tmp_path, lambda steps: None)
    lines = (dump / "2.jsonl").read_text().splitlines()
    lines[3] = lines[3][:-9]  # cut short, as a dump killed mid-write leaves it
    (dump / "2.jsonl").write_text("\n".join(lines) + "\n")
    out = cli("verl", str(dump), "--out", str(tmp_path / "run"), "--tokens-from", "response_length")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: dump/2.jsonl:4: not a JSON line")
    assert not (tmp_path / "run").exists()
    out = cli("verl", str(tmp_path / "absent"), "--out", str(tmp_path / "run"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "absent: no such folder" in out.stderr


def test_missing_fields_and_token_counts_are_named(tmp_path):
    rollouts, _ = verl_run(tmp_path / "verl", PROMPTS, HELD_OUT, steps=2, batch=3, n=4)
    for reading, says in [
        (Reading(tokens_from="response_length", difficulty_from="levels"), r"--difficulty-from levels: no such field"),
        (Reading(tokens_from="response_length", correct_from="accuracy"), r"--correct-from accuracy: no such field"),
        (Reading(tokenizer=tmp_path / "none.json"), r"--tokenizer .*none.json: not a tokenizers JSON file"),
    ]:
        with pytest.raises(IngestError, match=says):
            ingest("verl", rollouts, tmp_path / "run", reading)
    with pytest.raises(IngestError, match="rollouts/1.jsonl:1: a group of 4 completions where the run's groups have 8"):
        ingest("verl", rollouts, tmp_path / "run", Reading(tokens_from="response_length"), group_size=8)
    assert not (tmp_path / "run").exists()
    # no token counts and no tokenizer: the tokens are null, and what the source lacks says so
    out = ingest("verl", rollouts, tmp_path / "run", Reading())
    assert read_parts(out, "groups")["tokens"].isna().all()
    absent = json.loads((out / "run.json").read_text())["imported"]["absent"]
    assert any(a.startswith("token counts (no `completion_tokens` field") for a in absent)


def test_a_tokenizer_counts_the_completion_texts(tmp_path):
    """Without logged counts, a tokenizer.json (built here with `tokenizers`) counts each completion's text."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    rollouts, _ = verl_run(tmp_path / "verl", PROMPTS, HELD_OUT, steps=2, batch=3, n=4)
    out = ingest("verl", rollouts, tmp_path / "run", Reading(tokenizer=tmp_path))
    raw = read_jsonl(rollouts)
    words = raw["output"].str.split().str.len()
    assert read_parts(out, "groups")["tokens_total"].iloc[-1] == words.sum()
    how = json.loads((out / "run.json").read_text())["imported"]["how"]
    assert how["tokens"].startswith("the completion text re-encoded with `tokenizer.json`")


def test_the_ingest_writes_only_its_own_folder(tmp_path):
    rollouts, _ = verl_run(tmp_path / "verl", PROMPTS, HELD_OUT, steps=3, batch=3, n=4)
    reading = Reading(tokens_from="response_length")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(IngestError, match=r"--out .*theirs: exists and is not a folder an ingest wrote"):
        ingest("verl", rollouts, theirs, reading)
    assert tree(theirs) == {"notes.txt": b"mine"}
    out = ingest("verl", rollouts, tmp_path / "run", reading)
    (out / "report").mkdir()
    (out / "report" / "REPORT.md").write_text("a report built here")
    (out / "mine.txt").write_text("kept")
    first = tree(out)
    # fewer steps now: the earlier ingest's parts are gone, nothing it did not write is touched
    (rollouts / "3.jsonl").unlink()
    ingest("verl", rollouts, out, reading)
    again = tree(out)
    assert again["report/REPORT.md"] == b"a report built here" and again["mine.txt"] == b"kept"
    assert "groups/part-000003.parquet" in first and "groups/part-000003.parquet" not in again
    marker = json.loads(again[".grpo-lab-ingest"])
    assert set(marker["files"]) == {k for k in again if k not in (".grpo-lab-ingest", "mine.txt", "report/REPORT.md")}
    # a marker naming files outside its folder proves nothing
    (out / ".grpo-lab-ingest").write_text(json.dumps({"written_by": "python -m analysis.ingest",
                                                      "files": ["../theirs/notes.txt"]}))
    with pytest.raises(IngestError, match="exists and is not a folder an ingest wrote"):
        ingest("verl", rollouts, out, reading)
    assert tree(theirs) == {"notes.txt": b"mine"}


def test_trl_chat_messages_are_read_as_text(tmp_path):
    """Conversational TRL runs log the prompt and completion as chat messages: the prompt's identity is its
    messages, the completion's text its contents; groups and their ties are the same as plain text's."""
    cfg = job_config("fixed", group_size=4, seed=1, max_steps=2, prompts_per_step=3)
    trl = trl_export(simulate_groups(PROMPTS, cfg, "run-0").to_pandas(), tmp_path / "trl")
    plain = ingest("trl", trl, tmp_path / "plain", Reading(correct_from="accuracy"))
    for path in sorted((trl / "completions").glob("*.parquet")):
        frame = pd.read_parquet(path)
        frame["prompt"] = [[{"role": "system", "content": "Add."}, {"role": "user", "content": p}]
                           for p in frame["prompt"]]
        frame["completion"] = [[{"role": "assistant", "content": [{"type": "text", "text": c}]}]
                               for c in frame["completion"]]
        frame.to_parquet(path)
    chat = ingest("trl", trl, tmp_path / "chat", Reading(correct_from="accuracy"))
    a, b = read_parts(plain, "groups"), read_parts(chat, "groups")
    columns = ["step", "group_size", "n_correct", "tie", "tie_kind", "tokens"]
    pd.testing.assert_frame_equal(a[columns], b[columns])
    assert a["prompt_id"].nunique() == b["prompt_id"].nunique() and not set(a["prompt_id"]) & set(b["prompt_id"])


def test_racing_ingests_into_one_folder_leave_one_whole_run(tmp_path):
    """Four ingests of four runs (2 to 5 steps) into one folder at once: each ends whole or is refused in one line;
    the folder then holds exactly one run's files, all listed in its marker."""
    sources = []
    for k in range(4):
        rng = np.random.default_rng(k)
        sources.append(write_verl(tmp_path / f"dump{k}", {s: verl_rows(PROMPTS, s, 4, rng, batch=3)
                                                          for s in range(1, k + 3)}))
    out = tmp_path / "run"
    procs = [subprocess.Popen([sys.executable, "-m", "analysis.ingest", "verl", str(src), "--out", str(out),
                               "--tokens-from", "response_length"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for src in sources]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(code == 0 or (code == 2 and err.count("\n") == 1 and "another ingest is writing it now" in err)
               for code, err in results), results
    assert any(code == 0 for code, _ in results)
    files = {k for k in tree(out) if k != ".grpo-lab-ingest"}
    assert set(json.loads((out / ".grpo-lab-ingest").read_text())["files"]) == files
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    groups = read_parts(out, "groups")
    assert set(groups["run_id"]) == {run_id}
    source = Path(json.loads((out / "run.json").read_text())["imported"]["source"])
    assert source in [s.resolve() for s in sources]
    assert sorted(set(groups["step"])) == sorted(int(p.stem) for p in source.glob("*.jsonl"))
    assert not [p for p in tmp_path.iterdir() if ".ingest-" in p.name]  # no staging folder left


def test_trls_own_count_is_compared_step_by_step_and_a_difference_is_named(tmp_path):
    """trainer_state.json's frac_reward_zero_std per step against the recomputed ties: equal where TRL's count is
    the groups' (scale_rewards='group'); a step where TRL logged another fraction (its batch std, for one) is named,
    and the reward functions are the ones trainer_state.json names."""
    cfg = job_config("fixed", group_size=4, seed=1, max_steps=5, prompts_per_step=4)
    groups = simulate_groups(PROMPTS, cfg, "run-0").to_pandas()
    trl = trl_export(groups, tmp_path / "trl")
    fractions = groups.groupby("step")["tie"].mean()
    history = [{"step": int(s), "loss": 0.1 * s, "rewards/accuracy/mean": 0.5,
                "frac_reward_zero_std": float(f) if s != 4 else 1.0} for s, f in fractions.items()]
    (trl / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    out = ingest("trl", trl, tmp_path / "run", Reading(correct_from="accuracy"))
    record = json.loads((out / "run.json").read_text())["imported"]
    assert fractions[4] != 1.0
    assert record["tie_check"] == {"steps": 5, "equal": 4, "differ": [4], "largest_difference": 1.0 - fractions[4],
                                   "only_logged_by_tool": []}
    assert record["how"]["reward functions"] == "named by trainer_state.json"
    assert read_parts(out, "steps")["loss"].tolist() == [0.1 * s for s in range(1, 6)]
    cli_out = cli("trl", str(trl), "--out", str(tmp_path / "again"), "--correct-from", "accuracy")
    assert "equal TRL's own logged frac_reward_zero_std at 4 of 5 steps (not at steps [4]" in cli_out.stdout


def _plain_trl(tmp_path: Path) -> Path:
    """A TRL run whose script set log_completions=True and nothing more: no `completion_tokens`, no `level`."""
    cfg = job_config("fixed", group_size=4, seed=1, max_steps=6, prompts_per_step=6)
    trl = trl_export(simulate_groups(PROMPTS, cfg, "run-0").to_pandas(), tmp_path / "trl")
    for path in (trl / "completions").glob("*.parquet"):
        pd.read_parquet(path).drop(columns=["completion_tokens", "level"]).to_parquet(path)
    return trl


def _tokenizer(folder: Path, split: str) -> Path:
    """A tokenizer.json of one token a word (`split` "word") or a character ("char"), as TRL saves a fast
    tokenizer beside each checkpoint."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace() if split == "word" else pre_tokenizers.Split(Regex("."),
                                                                                                "isolated")
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def test_a_plain_trl_run_counts_tokens_with_the_tokenizer_its_latest_checkpoint_saved(tmp_path):
    """No token counts logged: the tokenizer.json of the latest checkpoint (by number: 10 after 2) counts the
    completion texts; one named by --tokenizer is used before it."""
    trl = _plain_trl(tmp_path)
    _tokenizer(trl / "checkpoint-2", "char")
    latest = _tokenizer(trl / "checkpoint-10", "word")
    out = ingest("trl", trl, tmp_path / "run", Reading(correct_from="accuracy"))
    groups = read_parts(out, "groups")
    assert (groups["tokens"] == 2 * 4).all()  # "answer k": two words a completion
    record = json.loads((out / "run.json").read_text())["imported"]
    assert record["how"]["tokens"].startswith(f"the completion text re-encoded with `tokenizer.json` found at {latest}")
    assert not any(a.startswith("token counts") for a in record["absent"])
    named = ingest("trl", trl, tmp_path / "named", Reading(correct_from="accuracy", tokenizer=trl / "checkpoint-2"))
    assert (read_parts(named, "groups")["tokens"] == len("answer 0") * 4).all()


def test_a_plain_trl_run_ingests_with_no_flags_its_tokens_absent_and_reports(tmp_path):
    """No token counts and no tokenizer anywhere: the ingest writes null tokens, says in its summary and in run.json
    which report sections that removes, and the report is built without them."""
    trl = _plain_trl(tmp_path)
    run = tmp_path / "run"
    out = cli("trl", str(trl), "--out", str(run))
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stdout.splitlines() if line.startswith("not in the source: token counts")]
    assert len(said) == 1 and "the report leaves out its section at equal tokens" in said[0]
    groups = read_parts(run, "groups")
    assert groups["tokens"].isna().all() and groups["tokens_total"].isna().all()
    assert read_parts(run, "steps")["tokens_total"].isna().all()
    absent = json.loads((run / "run.json").read_text())["imported"]["absent"]
    assert said[0].removeprefix("not in the source: ") in absent
    loaded = load(run)  # the contract takes null token counts: no part skipped
    assert len(loaded.groups) == len(groups) and loaded.groups["tokens"].isna().all()
    report = subprocess.run([sys.executable, "-m", "analysis", str(run), "--out", str(tmp_path / "report")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    text = (tmp_path / "report" / "REPORT.md").read_text()
    details = (tmp_path / "report" / "DETAILS.md").read_text()
    assert "samples per job (arm means; generated tokens not recorded)" in text
    assert not re.search(r"\bnan\b", text + details)  # no number printed from a missing count
    assert "## At equal tokens\n\nNot measured: `run` records no token counts" in details
    spent = pd.read_csv(tmp_path / "report" / "tables" / "budget_by_arm.csv")
    assert spent["tokens"].isna().all() and (spent["samples"] == len(groups) * 4).all()


def test_each_tool_says_its_own_options_and_refuses_anothers_in_one_line(tmp_path):
    """`TOOL --help` lists the options only that tool takes and an example; another tool's option is one line, from
    the command line and from the Python API alike, before anything is read or written."""
    from analysis.ingest import TOOLS

    for name, tool in TOOLS.items():
        helped = cli(name, "--help")
        assert helped.returncode == 0 and f"example:\n  {tool.example}" in helped.stdout
        assert all(option.flag in helped.stdout for option in tool.options)
        others = {o.flag for t in TOOLS.values() if t is not tool for o in t.options} - {o.flag for o in tool.options}
        assert not any(f"{flag} " in helped.stdout for flag in others)
    rollouts, _ = verl_run(tmp_path / "verl", PROMPTS, HELD_OUT, steps=2, batch=3, n=4)
    out = cli("verl", str(rollouts), "--out", str(tmp_path / "run"), "--reward-weights", "1,2")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: --reward-weights: not an option of verl (its own: --validation; ")
    with pytest.raises(IngestError, match=r"^--validation: not an option of trl \(its own: --reward-weights; "):
        ingest("trl", rollouts, tmp_path / "run", validation=rollouts)
    assert not (tmp_path / "run").exists()


def _trl_edit(tmp_path: Path, edit) -> Path:
    """A plain TRL run's completions files, the first one edited by `edit(frame)`."""
    trl = _plain_trl(tmp_path)
    first = sorted((trl / "completions").glob("*.parquet"))[0]
    frame = pd.read_parquet(first)
    edit(frame)
    frame.to_parquet(first)
    return trl


def _six_of_one(frame):  # one prompt logged 6 times among groups of 4 (two rows of the next group renamed)
    frame.loc[4:5, "prompt"] = frame.loc[0, "prompt"]
    frame.loc[0:5, "prompt"] = frame.loc[0, "prompt"]
    frame.loc[6:7, "prompt"] = "another prompt"


PROBED = {  # the hostile trials of issue 56 on the ingest: name -> (make the source, the one line's pattern)
    "a run of 6 among groups of 4": (lambda t: _trl_edit(t, _six_of_one),
                                     r"completions_00001\.parquet:row 0: 6 consecutive completions of one prompt where "
                                     r"most runs are 4 long"),
    "an infinite reward": (lambda t: _trl_edit(t, lambda f: f.__setitem__("accuracy", f["accuracy"].where(
        f.index != 2, np.inf))), r"completions_00001\.parquet:row 2: reward inf is not a finite number"),
    "a step column against its file's name": (lambda t: _trl_edit(t, lambda f: f.__setitem__("step", 3)),
                                              r"completions_00001\.parquet:row 0: step 3 in a file named for step 1"),
    "a verl score past float32": (lambda t: _dump_with(t, lambda s: s[2][1].__setitem__("score", 1e39)),
                                  r"dump/2\.jsonl:2: reward 1e\+39 is not a finite number"),
    "a byte that is not UTF-8": (lambda t: _bytes(_dump_with(t, lambda s: None), b'{"input": "\xff"}'),
                                 r"dump/2\.jsonl:3: not UTF-8 text \(byte 12"),
    "a line nested too deep": (lambda t: _bytes(_dump_with(t, lambda s: None), b"[" * 100_000 + b"]" * 100_000),
                               r"dump/2\.jsonl:3: JSON nested too deep to read"),
}


def _bytes(dump: Path, line: bytes) -> Path:
    lines = (dump / "2.jsonl").read_bytes().splitlines()
    lines[2] = line
    (dump / "2.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return dump


@pytest.mark.parametrize("case", PROBED)
def test_the_probes_hostile_logs_are_one_line_each(tmp_path, case):
    make, says = PROBED[case]
    source = make(tmp_path)
    tool = "verl" if (source / "1.jsonl").exists() else "trl"
    reading = Reading(tokens_from="response_length") if tool == "verl" else Reading(correct_from="accuracy")
    with warnings.catch_warnings():  # the one line is all a user reads: no numpy warning before it
        warnings.simplefilter("error")
        with pytest.raises(IngestError, match=says):
            ingest(tool, source, tmp_path / "run", reading)
    assert not (tmp_path / "run").exists()


def test_where_an_ingest_may_write_and_what_it_leaves(tmp_path):
    trl = _plain_trl(tmp_path)
    with pytest.raises(IngestError, match=r"--correct-at nan: must be a number"):
        ingest("trl", trl, tmp_path / "a", Reading(correct_from="accuracy", correct_at=float("nan")))
    job = tmp_path / "job"  # a running job's folder: nothing is ingested inside it
    job.mkdir()
    (job / "run.json").write_text("{}")
    with pytest.raises(IngestError, match=r"inside the run folder .*job \(its run\.json\)"):
        ingest("trl", trl, job / "imported", Reading(correct_from="accuracy"))
    with pytest.raises(IngestError, match=r"--out /proc/grpo-lab-ingest: cannot write there"):
        ingest("trl", trl, Path("/proc/grpo-lab-ingest"), Reading(correct_from="accuracy"))
    out = ingest("trl", trl, tmp_path / "run", Reading(correct_from="accuracy"))
    record = json.loads((out / "run.json").read_text())["imported"]
    assert any("checked against nothing (no trainer_state.json" in a for a in record["absent"])
    (out / "eval").mkdir()  # the user's empty folder, and a file of theirs where the ingest writes one
    ours = sorted((out / "groups").glob("part-*.parquet"))[0]
    (out / "groups" / "part-000099.parquet").write_bytes(b"mine")
    ingest("trl", trl, out, Reading(correct_from="accuracy"))  # again: the user's files stay
    assert (out / "eval").is_dir() and (out / "groups" / "part-000099.parquet").read_bytes() == b"mine"
    ours.unlink()
    ours.write_bytes(b"mine too")  # a name the ingest writes, no longer its own file: refused, nothing replaced
    marker = json.loads((out / ".grpo-lab-ingest").read_text())
    marker["files"].remove(f"groups/{ours.name}")
    (out / ".grpo-lab-ingest").write_text(json.dumps(marker))
    with pytest.raises(IngestError, match=rf"groups/{ours.name} there is not the ingest's"):
        ingest("trl", trl, out, Reading(correct_from="accuracy"))
    assert ours.read_bytes() == b"mine too"


def test_run_ids_come_from_the_logs_not_their_path(tmp_path):
    trl = _plain_trl(tmp_path)
    first = json.loads((ingest("trl", trl, tmp_path / "a", Reading(correct_from="accuracy")) / "run.json")
                       .read_text())["run_id"]
    copy = tmp_path / "elsewhere"
    shutil.copytree(trl, copy)
    again = json.loads((ingest("trl", copy, tmp_path / "b", Reading(correct_from="accuracy")) / "run.json")
                       .read_text())["run_id"]
    assert again == first  # one run copied is one run
    path = sorted((trl / "completions").glob("*.parquet"))[-1]
    frame = pd.read_parquet(path)
    frame["accuracy"] = 1.0 - frame["accuracy"]  # a second run written to the same path
    frame["advantage"] = -frame["advantage"]
    frame.to_parquet(path)
    other = json.loads((ingest("trl", trl, tmp_path / "c", Reading(correct_from="accuracy")) / "run.json")
                       .read_text())["run_id"]
    assert other != first
