"""`python -m analysis.ingest trl|verl SOURCE --out RUN_DIR [options]`: another tool's logged completions as a
grpo-lab run directory, which `python -m analysis RUN_DIR [RUN_DIR ...]` reports like any run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from analysis.ingest import READERS, IngestError, Reading, ingest
from analysis.ingest.tables import PASS_RATE, TOKEN_COLUMN


def _setting(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: not KEY=VALUE")
    return key.strip(), yaml.safe_load(value) if value.strip() else None


def _weights(text: str) -> list[float]:
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not comma-separated numbers") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.ingest", description=__doc__)
    parser.add_argument("tool", choices=sorted(READERS), help="the tool that wrote the logs")
    parser.add_argument("source", help="trl: the run's output_dir (or its completions/ folder); verl: the folder "
                        "trainer.rollout_data_dir named")
    parser.add_argument("--out", required=True, help="the run directory to write: a new or empty folder, or one an "
                        "earlier ingest wrote (only its files are replaced)")
    parser.add_argument("--group-size", type=int, help="completions per prompt (TRL's num_generations, verl's "
                        "rollout.n); default: read from the logs' own grouping")
    parser.add_argument("--difficulty-from", default=PASS_RATE, metavar="FIELD|pass_rate",
                        help="a logged field naming each prompt's difficulty (e.g. level), or pass_rate (default): a "
                        "bin of the prompt's pass rate in its first group")
    parser.add_argument("--correct-from", default="reward", metavar="FIELD",
                        help="the field a sample's correctness is read from (default: the reward the tool trained on; "
                        "e.g. accuracy for a TRL reward function, acc for verl)")
    parser.add_argument("--correct-at", type=float, default=1.0, help="correct where that field is >= this (default 1)")
    parser.add_argument("--answer-from", metavar="FIELD", help="the field holding each held-out sample's extracted "
                        "answer (for cons@k; e.g. verl's pred)")
    parser.add_argument("--tokens-from", metavar="FIELD", help="the field holding each completion's generated token "
                        f"count (default: {TOKEN_COLUMN} where logged)")
    parser.add_argument("--tokenizer", metavar="PATH", help="else a tokenizer.json (or the model's folder) to count "
                        "the completion texts' tokens with (TRL: found in the output_dir's checkpoints)")
    parser.add_argument("--reward-weights", type=_weights, metavar="W1,W2,...",
                        help="trl: GRPOConfig's reward_weights, one per reward function (default 1 each)")
    parser.add_argument("--validation", metavar="DIR", help="verl: the folder trainer.validation_data_dir named "
                        "(held-out evaluations)")
    parser.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a config value to record (repeat): what tells ingested runs apart as arms or seeds, "
                        "e.g. --set seed=1 --set algo.beta=0.04")
    args = parser.parse_args(argv)
    reading = Reading(difficulty_from=args.difficulty_from, correct_from=args.correct_from,
                      correct_at=args.correct_at, answer_from=args.answer_from, tokens_from=args.tokens_from,
                      tokenizer=Path(args.tokenizer) if args.tokenizer else None)
    try:
        out = ingest(args.tool, args.source, args.out, reading, group_size=args.group_size,
                     reward_weights=args.reward_weights, validation=args.validation, settings=dict(args.set))
    except IngestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record = json.loads((out / "run.json").read_text())["imported"]
    check = record.get("tie_check")
    print(f"{args.tool} run {args.source} -> {out} ({len(record['files'])} files read)")
    if check:
        print(f"ties recomputed from the rewards equal TRL's own logged frac_reward_zero_std at {check['equal']} of "
              f"{check['steps']} steps" + (f" (not at steps {check['differ']}: docs/GUIDE.md says where the two "
                                           "counts differ)" if check["differ"] else ""))
    print(f"report: python -m analysis {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
