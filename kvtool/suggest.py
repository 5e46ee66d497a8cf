"""Suggestions for a misspelt word: a rule code, a flag, a model, a connector, a key.

One helper for every place kvtool says "did you mean": the rule families' findings and the
command line's one-line errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The closest candidate to ``word``, or None.

    A candidate that extends ``word`` (a dropped suffix such as ``V1``) wins, the shortest
    first; otherwise difflib's best match with a ratio of at least ``cutoff``.
    """
    pool = list(candidates)
    extensions = sorted((c for c in pool if c.startswith(word) and c != word), key=len)
    if extensions:
        return extensions[0]
    import difflib  # only needed when something is misspelt; keeps audit start-up lean

    matches = difflib.get_close_matches(word, pool, n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" Did you mean X?"`` or an empty string."""
    match = closest(word, candidates)
    return f" Did you mean `{match}`?" if match else ""


_CODE = re.compile(r"([A-Za-z]+)0*(\d+)")


def closest_code(word: str, codes: Iterable[str]) -> str | None:
    """For a rule-code-shaped ``word`` (``CN99``, ``vg2``), the code of the same family whose
    number is nearest (``CN099``, or the family's last code); None for other words."""
    shape = _CODE.fullmatch(word.strip())
    if shape is None:
        return None
    family, number = shape.group(1).upper(), int(shape.group(2))
    numbered = [
        (abs(int(match.group(2)) - number), code)
        for code in codes
        if (match := _CODE.fullmatch(code)) and match.group(1) == family
    ]
    return min(numbered)[1] if numbered else None


def did_you_mean_rule(word: str, codes: Iterable[str], names: Iterable[str]) -> str:
    """``" Did you mean X?"`` for a misspelt rule code or name, or an empty string."""
    code_list = list(codes)
    match = closest_code(word, code_list)
    if match is None:
        return did_you_mean(word, [*code_list, *names])
    return f" Did you mean `{match}`?"
