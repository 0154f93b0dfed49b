"""The compact letter display of a set of pairwise verdicts (Piepho 2004, "An algorithm for a letter-based
representation of all-pairwise comparisons"): each arm gets letters so that two arms share a letter exactly when
no resolved ordering separates them. A table then says in one column which arms the seeds tell apart.

Insert-and-absorb: start with one letter held by every arm; for each resolved pair, split every letter holding
both into one without the first arm and one without the second, then drop a letter whose arms another letter
holds too. What is left covers every unresolved pair with a letter (the cliques of the graph of unresolved pairs)
and no resolved one. A letter whose every pair (and every arm's membership) another letter also covers is then
dropped, so a table carries few letters. Arms are kept as bit masks: 20 arms have at most a few thousand
letters along the way."""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence

SYMBOLS = string.ascii_lowercase + string.ascii_uppercase  # then a', b', ...: never ambiguous when concatenated


def compact_letters(arms: Sequence[str], resolved: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{arm: its letters} for `arms` (best first) given the `resolved` pairs (better, worse: the order within a
    pair does not matter). Two arms share a letter exactly when their pair is not resolved; every arm has one;
    the best arm has "a" and each new letter first appears on the highest arm it can. ValueError where a pair
    names an arm not in `arms`. Deterministic: the same input, the same letters."""
    position = {arm: i for i, arm in enumerate(dict.fromkeys(arms))}
    if len(position) != len(arms):
        raise ValueError("compact_letters: an arm is listed twice")
    if not position:
        return {}
    columns = [(1 << len(position)) - 1]  # one letter held by every arm
    for pair in dict.fromkeys(tuple(p) for p in resolved):
        unknown = [arm for arm in pair if arm not in position]
        if unknown:
            raise ValueError(f"compact_letters: {', '.join(unknown)} is not one of the arms")
        i, j = (1 << position[pair[0]]), (1 << position[pair[1]])
        if i == j:
            continue
        columns = _absorbed(_inserted(columns, i, j))
    columns = _without_redundant(columns)
    columns.sort(key=lambda mask: _members(mask))  # by the highest arm holding it, then the next
    letters = {arm: "" for arm in position}
    for index, mask in enumerate(columns):
        for i in _members(mask):
            letters[arms[i]] += _symbol(index)
    return letters


def _inserted(columns: list[int], i: int, j: int) -> list[int]:
    """Every letter holding both arms (bits `i`, `j`) split in two: one without i, one without j."""
    out = []
    for mask in columns:
        if mask & i and mask & j:
            out += [mask & ~i, mask & ~j]
        else:
            out.append(mask)
    return out


def _absorbed(columns: list[int]) -> list[int]:
    """The letters left once every letter whose arms another letter holds (a subset, or a duplicate) is dropped."""
    unique = sorted(set(columns), key=lambda mask: (-mask.bit_count(), mask))  # largest first
    kept: list[int] = []
    for mask in unique:
        if mask and not any(mask & other == mask for other in kept):
            kept.append(mask)
    return kept


def _without_redundant(columns: list[int]) -> list[int]:
    """The letters with each one dropped whose every arm, and every pair of its arms, the other letters hold:
    tried smallest letter first (then the latest), so the larger letters that carry many pairs stay."""
    kept = list(columns)
    for mask in sorted(columns, key=lambda mask: (mask.bit_count(), -_members(mask)[0], mask)):
        others = [other for other in kept if other != mask]
        if all(mask & ~_held_with(others, 1 << i) == 0 for i in _members(mask)):
            kept = others
    return kept


def _held_with(columns: list[int], arm: int) -> int:
    """The arms sharing some letter of `columns` with `arm` (itself included where any letter holds it)."""
    out = 0
    for mask in columns:
        if mask & arm:
            out |= mask
    return out


def _members(mask: int) -> list[int]:
    """The positions of the arms a letter holds, highest arm (lowest position) first."""
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _symbol(index: int) -> str:
    """The letter of the `index`-th column: a..z, A..Z, then a', b', ... with one more prime each round."""
    return SYMBOLS[index % len(SYMBOLS)] + "'" * (index // len(SYMBOLS))
