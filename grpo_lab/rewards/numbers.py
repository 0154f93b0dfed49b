"""Numbers in free text, for the `last_number` answer format: the last number of a finished reply, read whole.

lm-evaluation-harness's GSM8K "flexible-extract" takes the last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)`, which
reads "13th", "x13" and "v13" as 13, "12-13" as -13, "1,00" as 100 and a 70-digit run whole. Here the same
idea (a small instruct model answers in a sentence: "5 + 8 = 13.") is made exact:

1. a *number token* is a maximal run of ASCII digits, "." and "," that starts with a digit;
2. "." and "," ending the run are sentence punctuation ("13." "13," "13..." are 13);
3. a sign ("-", "+", U+2212) directly before the run is its sign, unless the sign itself follows a digit, a
   letter, "_" or a closing bracket ("5-3" and "12-13" are an operator between two numbers; "-13", "= -13",
   "(−13)" are negative); two signs ("-+13", "--13") make it malformed;
4. a run touching a letter, "_" or a non-ASCII digit on either side is part of a word, not a number, and is
   skipped ("x2", "2x", "13th", "v13", "1e5", "13_000", "13²");
5. what is left must be, whole, digits or comma-grouped thousands, optionally with a decimal part
   (`[0-9]+` or `[1-9][0-9]{0,2}(,[0-9]{3})+`, then `(\\.[0-9]+)?`); anything else ("1,00", "10,00", "13.0.0", and
   "0,046": thousands never start with 0, so that comma is a decimal comma or a typo, never 46) is a *malformed*
   number: the last token malformed makes the answer wrong (no earlier number is read instead);
6. the value is exact: commas dropped, an integer-valued decimal is that integer ("13.0"), other decimals their
   value ("13.5" is not 13); leading zeros are fine ("013"); runs over MAX_RUN characters are malformed;
7. only ASCII digits are digits ("١٣" and "１３" are not numbers; never `\\d` or int() on raw text);
8. a number stated as not exact is no final answer: directly after (spaces, "$" and "*" between) an
   approximation ("≈", "~", "\\approx", "about", "roughly", ...), a bound ("<", "≥", "at least", "over", "up to",
   ...), a tolerance ("±", "+/-"), a negation ("not") or a guess ("maybe", "probably"), or directly followed by
   "+" ("46+ apples"), it is *qualified*: malformed, so "≈46", "about 46" and "not 46" are never 46.
A reply cut at max_new_tokens has no last number (its digits may be the start of a longer one): the rules
module decides that, with the one-final-answer rule (grpo_lab/rewards/rules.py).
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_RUN = 64  # a longer digit run is malformed, never converted (no huge int())
SIGNS = "-+\u2212"
_RUN = re.compile(r"[0-9][0-9.,]*")
_WHOLE = re.compile(r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")
# what makes the number after it not an exact final answer (rule 8); matched against the text just before it
_QUALIFIER = re.compile(
    r"(?:(?<![A-Za-z])(?:approximately|approx\.?|about|around|roughly|nearly|almost|circa|ca\.|close\s+to|over|"
    r"under|above|below|at\s+least|at\s+most|more\s+than|less\s+than|fewer\s+than|greater\s+than|up\s+to|not|"
    r"maybe|perhaps|probably|possibly)|\\(?:approx|sim|simeq|le|leq|ge|geq|lt|gt|neq|ne|pm|mp)(?![A-Za-z])|"
    r"[≈≃≅∼≤≥≠±∓]|[<>]=?|!=|\+/-?|(?<![^\s(*])~)[\s$*]*(?:[-+\u2212][\s$*]*)?$", re.IGNORECASE)
# (a sign may come between: "\\approx-13"; "+/" before a signed number is "+/-"; "~" counts after a space, "(" or "*"
# only: "is~13" and "$~13$" are LaTeX ties)
_TAG = re.compile(r"<[A-Za-z/][^<>\n]{0,40}>[\s$*]*$")  # "<answer>13": a tag's ">" is no bound
_LOOK_BACK = 32  # characters before a number searched for its qualifier (the longest: "greater than" and dress)
_WRAPS = (("$", "$"), ("**", "**"))  # what may dress a reply that is the number alone


def _wordish(ch: str) -> bool:
    """A character that glues a digit run into a word: a letter, "_", a non-ASCII digit (or numeral)."""
    return ch.isalpha() or ch == "_" or (not ch.isascii() and (ch.isdigit() or ch.isnumeric()))


def number_tokens(text: str) -> list[tuple[str, Fraction | None]]:
    """Every number token of `text`, in order: (its text, sign included; its exact value, None when malformed)."""
    out = []
    for m in _RUN.finditer(text):
        start, stop = m.span()
        before = text[start - 1] if start else ""
        after = text[stop] if stop < len(text) else ""
        if _wordish(before) or _wordish(after):
            continue  # part of a word
        run = m.group().rstrip(".,")  # sentence punctuation after the number
        negative = signs = False
        if before and before in SIGNS:
            prev = text[start - 2] if start >= 2 else ""
            if not (prev.isalnum() or (prev and prev in ")]}_")):  # "5-3" is an operator, "-3" and "= -3" a sign
                negative, start, signs = before != "+", start - 1, bool(prev) and prev in SIGNS
        end = m.start() + len(run)
        while signs and start and text[start - 1] in SIGNS:  # "-+13", "---13": shown whole
            start -= 1
        qualified = _QUALIFIER.search(text, max(0, start - _LOOK_BACK), start)
        if qualified and qualified.group().startswith(">") and _TAG.search(text, max(0, start - 2 * _LOOK_BACK), start):
            qualified = None
        if qualified:
            start = qualified.start()
        more = _more_than(text, end)
        shown = text[start:end + more]
        if qualified or signs or more or len(run) > MAX_RUN or not _WHOLE.fullmatch(run):
            out.append((shown, None))
            continue
        value = Fraction(run.replace(",", ""))
        out.append((shown, -value if negative else value))
    return out


def _more_than(text: str, end: int) -> bool:
    """A "+" right after the number that is no operator ("46+", "46+ apples", "46+."): at least 46, not 46. An
    operator is followed by its operand: at once ("46+x", "46+2"), or past spaces by a number or a bracket."""
    if text[end:end + 1] != "+":
        return False
    after = text[end + 1:end + 2]
    if after.isalnum() or after in "(" + SIGNS and after:
        return False
    rest = text[end + 1:end + 16].lstrip()
    return not (after.isspace() and rest[:1] and (rest[0].isdigit() or rest[0] in "(" + SIGNS))


def last_number(text: str) -> tuple[str | None, Fraction | None]:
    """(the last number token's text, its value) of `text`; (None, None) when it has none; (text, None) when
    the last one is malformed."""
    tokens = number_tokens(text)
    return tokens[-1] if tokens else (None, None)


def number_text(value: Fraction) -> str:
    """The answer column's text of a value: "13", "-4", "13.5" (a value read from a decimal is a finite one)."""
    if value.denominator == 1:
        return str(value.numerator)
    digits = 0
    while (value * 10**digits).denominator != 1:  # a finite decimal: the denominator divides 10^digits
        digits += 1
    scaled = abs(value.numerator) * 10**digits // value.denominator
    whole, frac = divmod(scaled, 10**digits)
    return f"{'-' if value < 0 else ''}{whole}.{frac:0{digits}d}"


def number_alone(text: str) -> bool:
    """The reply is one number and nothing else: "13", "13.", "-13", "13.0", "$13$", "**13**." (one wrapper,
    balanced, and at most one final "."); "The answer is 13.", "13 apples", "$13", "13 13", "13..." are not."""
    body = text.strip()
    if body.endswith(".") and not body.endswith(".."):
        body = body[:-1].rstrip()
    for left, right in _WRAPS:
        if len(body) > len(left) + len(right) and body.startswith(left) and body.endswith(right):
            body = body[len(left):-len(right)].strip()
            break
    if body[:1] in SIGNS and body[:1]:
        body = body[1:]
    return bool(_WHOLE.fullmatch(body)) and len(body) <= MAX_RUN
