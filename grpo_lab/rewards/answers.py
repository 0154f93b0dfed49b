"""Where a completion states a final answer, and what each statement says once its dress is taken off.

A grader reads every place a reply commits to an answer, not only the one a format names:
- a box: `\\boxed{...}`, with or without space before the brace, `\\fbox{...}`, `\\framebox{...}`; a box
  command without a braced argument is a statement that cannot be read;
- an answer line: a line that begins (past markdown marks) with `Answer:` or `Final answer:`;
- an answer phrase: `answer is` followed at once by a number, `$...$` or a box.
`statements` returns what each says; `clean` takes off what only dresses a value (spaces, `$...$`,
`\\textbf{}`, `\\text{}`, a nested box, markdown emphasis, a final sentence period). Untrusted text: every
scan is linear or bounded by MAX_ANSWER_CHARS, and a reply with more than MAX_STATEMENTS is not read.
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 200  # longer answers are wrong unread: no int() of a huge digit string, no huge parse
MAX_STATEMENTS = 16  # final-answer statements read from one completion; more is a list of guesses: wrong

_BOX = re.compile(r"\\(?:boxed|fbox|framebox)(?![a-zA-Z])\s*")
_LINE = re.compile(r"^[ \t>*#_\-]*(?:final[ \t]+)?answer[ \t]*[*_]*[ \t]*[:：](.*)$", re.IGNORECASE | re.MULTILINE)
_PHRASE = re.compile(r"\banswer\s+is\s*:?\s*(\$[^$\n]{1,200}\$|[+-]?[0-9][0-9,]*(?:\.[0-9]+)?(?![0-9]))",
                     re.IGNORECASE)
# what only dresses a value: unwrapped (the whole value), repeatedly
_WRAPPERS = ("boxed", "fbox", "framebox", "textbf", "mathbf", "text", "textrm", "mathrm", "bm", "boldsymbol")
_ENCLOSING = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**"), ("__", "__"), ("*", "*"),
              ("`", "`"))
_SPACING = re.compile(r"\\[,;:! ]|~|\\quad|\\qquad|\\displaystyle(?![a-zA-Z])")


def braced(text: str, start: int) -> str | None:
    """The contents of the brace group opening at text[start] == "{", balanced and at most MAX_ANSWER_CHARS
    long; None when there is none."""
    if start >= len(text) or text[start] != "{":
        return None
    depth = 0
    for j in range(start, min(len(text), start + MAX_ANSWER_CHARS + 2)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + 1:j]
    return None


def boxes(text: str) -> list[str | None]:
    """Every box's contents in order (None for a box command whose argument cannot be read)."""
    return [braced(text, m.end()) for m in _BOX.finditer(text)]


def last_boxed(text: str) -> str | None:
    """Contents of the last box in `text` (any of the box commands), braces balanced; None if unreadable."""
    found = boxes(text)
    return found[-1] if found else None


def statements(completion: str) -> list[str | None] | None:
    """What every final-answer statement of `completion` says, raw, in no particular order (None for an
    unreadable one); None when the completion makes more than MAX_STATEMENTS of them."""
    if len(_BOX.findall(completion)) > MAX_STATEMENTS:
        return None
    said: list[str | None] = boxes(completion)
    lines = [m.group(1).strip().strip("*_").strip() for m in _LINE.finditer(completion)]  # **Answer:** 46
    said += [v for v in lines + [m.group(1) for m in _PHRASE.finditer(completion)] if not _only_a_box(v)]
    return said if len(said) <= MAX_STATEMENTS else None


def _only_a_box(value: str) -> bool:
    """A line or phrase whose value is a box and nothing more ("The final answer is $\\boxed{46}$."): that box
    is the statement, already read."""
    text = value.strip().rstrip(".").strip().strip("$").strip()
    m = _BOX.match(text)
    inner = braced(text, m.end()) if m else None
    return inner is not None and m.end() + len(inner) + 2 == len(text)


def answer_line(completion: str) -> str | None:
    """The value of the completion's last non-empty line when that line is an answer line, else None."""
    last = completion.rstrip().rsplit("\n", 1)[-1]
    m = _LINE.fullmatch(last.strip()) if len(last) <= MAX_ANSWER_CHARS else None
    return m.group(1).strip().strip("*_").strip() if m else None


def clean(value: str) -> str:
    """A statement's value without its dress: "$\\textbf{ 46 }$." -> "46". Spaces inside stay ("4 6" is not
    46 to a reader of the text; LaTeX checks drop them themselves); a value that is only dress becomes ""."""
    text = _SPACING.sub(" ", value).strip()
    while True:
        before = text
        text = text.strip()
        if text.endswith(".") and not text.endswith(".."):  # a sentence's end, not part of the value
            text = text[:-1].rstrip()
        for left, right in _ENCLOSING:
            if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text = text[len(left):len(text) - len(right)]
                break
        m = re.match(r"\\(" + "|".join(_WRAPPERS) + r")(?![a-zA-Z])\s*", text)
        if m and (inner := braced(text, m.end())) is not None and m.end() + len(inner) + 2 == len(text):
            text = inner
        if text == before:
            return text


# Qualifiers that make a value something else than one answer (approximate, a range, a list of two, a
# percentage, "and so on"): an answer may carry one only where the gold carries it too.
_HEDGE_COMMANDS = frozenset({"approx", "approxeq", "sim", "simeq", "thicksim", "thickapprox", "doteq", "propto",
                             "ldots", "dots", "cdots", "dotsc", "dotsb", "vdots", "pm", "mp", "neq", "ne", "leq", "le",
                             "geq", "ge", "leqslant", "geqslant", "lesssim", "gtrsim", "lt", "gt", "ll", "gg", "lor",
                             "vee", "land", "wedge", "%"})
_HEDGE_SIGNS = ("\\\\", "...", "%", "<", ">", "≈", "±", "…", "≠", "≤", "≥", "?")
_HEDGE_WORDS = re.compile(r"(?<![a-zA-Z\\])(or|and|approximately|approx|about|roughly|nearly|around|either|maybe)"
                          r"(?![a-zA-Z])", re.IGNORECASE)


def hedges(text: str) -> set[str]:
    """The qualifiers in a LaTeX value: hedging commands, signs and words."""
    found = {m for m in re.findall(r"\\([a-zA-Z]+|%)", text) if m in _HEDGE_COMMANDS}
    found |= {s for s in _HEDGE_SIGNS if s in text}
    found |= {w.lower() for w in _HEDGE_WORDS.findall(text)}
    return found
