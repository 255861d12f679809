"""'Did you mean' for a misspelled command-line flag (``--http-prot`` -> ``--http-port``).

naiad serve has about 150 flags with tritonserver's long names; argparse only says a flag is
unrecognized. difflib's close matches over the known option strings name the likely one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

MAX_SUGGESTIONS = 3
# difflib's ratio: 0.6 is its default; a misspelled long flag stays well above it.
CLOSENESS = 0.6


def suggestions(unknown: Sequence[str], options: Iterable[str]) -> list[str]:
    """One line per unknown flag in ``unknown`` (values are skipped) that has close
    matches among ``options``: ``--http-prot: did you mean --http-port?``."""
    known = sorted(set(options))
    lines = []
    for token in unknown:
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        close = difflib.get_close_matches(flag, known, n=MAX_SUGGESTIONS, cutoff=CLOSENESS)
        if close:
            lines.append(f"{flag}: did you mean {' or '.join(close)}?")
    return lines
