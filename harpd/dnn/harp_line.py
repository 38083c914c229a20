"""The words of one ``#HARP ...`` line: the one way the DNN planner's line readers split a line.

``#HARP dnn ...`` (spec) and ``#HARP checkpoint ...`` (checkpoint) are read the
same way, shell-quoted with ``#`` comments; each reader decides what an
unbalanced quote means for its own line (an error, or a line to skip).
"""

from __future__ import annotations

import shlex


def harp_line_words(raw: str) -> list[str]:
    """The line's words after its ``#HARP`` prefix (shlex, comments dropped); ValueError on an unbalanced quote."""
    text = raw.strip()
    if text[:5].upper() == "#HARP":
        text = text[5:].strip()
    return shlex.split(text, comments=True)
