"""`python -m analysis.ingest TOOL SOURCE --out RUN_DIR [options]`: another tool's logged completions as a grpo-lab
run directory, which `python -m analysis RUN_DIR [RUN_DIR ...]` reports like any run. `python -m analysis.ingest
TOOL --help`: what SOURCE is for that tool, its own options and an example."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import yaml

from analysis.ingest import TOOLS, IngestError, Reading, Tool, ingest, not_an_option
from analysis.ingest.tables import PASS_RATE, TOKEN_COLUMN

PROG = "python -m analysis.ingest"


class _OneLine(argparse.ArgumentParser):
    """argparse's errors in one line (its default prints the usage above them), naming where --help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} ({self.prog} --help)\n")


def _setting(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: not KEY=VALUE")
    return key.strip(), yaml.safe_load(value) if value.strip() else None


def _labels(text: str) -> tuple[str, ...]:
    labels = tuple(label.strip() for label in text.split(","))
    if not all(labels):
        raise argparse.ArgumentTypeError(f"{text!r}: labels separated by commas, none empty")
    return labels


def _shared(parser: argparse.ArgumentParser) -> None:
    """The options every tool takes."""
    shared = parser.add_argument_group("options of every tool")
    shared.add_argument("--out", required=True, help="the run directory to write: a new or empty folder, or one an "
                        "earlier ingest wrote (only its files are replaced)")
    shared.add_argument("--group-size", type=int, help="completions per prompt (TRL's num_generations, verl's "
                        "rollout.n, ...); default: read from the logs' own grouping")
    shared.add_argument("--difficulty-from", default=PASS_RATE, metavar="FIELD|pass_rate",
                        help="a logged field naming each prompt's difficulty (e.g. level), or pass_rate (default): a "
                        "bin of the prompt's pass rate in its first group")
    shared.add_argument("--difficulty-order", type=_labels, metavar="A,B,C",
                        help="that field's labels in the order the report shows them, e.g. easy,medium,hard "
                        "(default: the order they are first logged in)")
    shared.add_argument("--correct-from", default="reward", metavar="FIELD",
                        help="the field a sample's correctness is read from (default: the reward the tool trained on; "
                        "e.g. accuracy for a TRL reward function, acc for verl)")
    shared.add_argument("--correct-at", type=float, default=1.0, help="correct where that field is >= this "
                        "(default 1)")
    shared.add_argument("--answer-from", metavar="FIELD", help="the field holding each held-out sample's extracted "
                        "answer (for cons@k; e.g. verl's pred)")
    shared.add_argument("--tokens-from", metavar="FIELD", help="the field holding each completion's generated token "
                        f"count (default: {TOKEN_COLUMN} where logged, or counted from logged token ids)")
    shared.add_argument("--tokenizer", metavar="PATH", help="else a tokenizer.json (or the model's folder) to count "
                        "the completion texts' tokens with (default: one in the source's checkpoint-*/ folders; "
                        "without any, token counts are left absent and the token-aligned report sections out)")
    shared.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a config value to record (repeat): what tells ingested runs apart as arms or seeds, "
                        "e.g. --set seed=1 --set algo.beta=0.04")


def _tool_parser(commands: argparse._SubParsersAction, tool: Tool) -> None:
    doc = sys.modules[tool.read.__module__].__doc__ or ""
    parser = commands.add_parser(tool.name, help=f"{tool.title}; SOURCE: {tool.source}",
                                 description=doc.split("\n\n", 1)[0], epilog=f"example:\n  {tool.example}",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help=tool.source)
    _shared(parser)
    if tool.options:
        own = parser.add_argument_group(f"options of {tool.name} only")
        for option in tool.options:
            own.add_argument(option.flag, dest=option.name, type=option.type, metavar=option.metavar,
                             help=option.help)


def parser() -> argparse.ArgumentParser:
    top = _OneLine(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="tool", required=True, metavar="TOOL", parser_class=_OneLine,
                                  help=", ".join(TOOLS))
    for tool in TOOLS.values():
        _tool_parser(commands, tool)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parser().parse_known_args(argv)
    tool = TOOLS[args.tool]
    if extra:  # an option of another tool (or none): one line, as every other bad input
        unknown = next((a for a in extra if a.startswith("-")), None)
        print(f"error: {not_an_option(tool, unknown.split('=', 1)[0])}" if unknown else
              f"error: {extra[0]!r}: one SOURCE only ({PROG} {tool.name} --help)", file=sys.stderr)
        return 2
    reading = Reading(difficulty_from=args.difficulty_from, correct_from=args.correct_from,
                      correct_at=args.correct_at, answer_from=args.answer_from, tokens_from=args.tokens_from,
                      tokenizer=Path(args.tokenizer) if args.tokenizer else None,
                      difficulty_order=args.difficulty_order)
    try:
        out = ingest(tool.name, args.source, args.out, reading, group_size=args.group_size, settings=dict(args.set),
                     **{o.name: getattr(args, o.name) for o in tool.options})
    except IngestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record = json.loads((out / "run.json").read_text())["imported"]
    check = record.get("tie_check")
    print(f"{tool.name} run {args.source} -> {out} ({len(record['files'])} files read)")
    if check:
        print(f"ties recomputed from the rewards equal {tool.title}'s own logged frac_reward_zero_std at "
              f"{check['equal']} of {check['steps']} steps" + (
                  f" (not at steps {check['differ']}: docs/GUIDE.md says where the two counts differ)"
                  if check["differ"] else ""))
    for absent in record.get("absent") or []:
        print(f"not in the source: {absent}")
    print(f"report: python -m analysis {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
