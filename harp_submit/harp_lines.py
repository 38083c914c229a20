"""``#HARP ...`` lines: the script's own instructions to harp.

sbatch ignores them (they are shell comments and not ``#SBATCH``), so users
can put them anywhere in the script.  ``#HARP off`` opts the script out of
any rewrite; other lines (``#HARP dnn model=... gpus=...``) travel to harpd
verbatim in ``JobRequest.harp_lines`` for it to interpret.
"""

from __future__ import annotations

import re

# at column 0, like #SBATCH; "#HARPOON" is not ours
_HARP_LINE = re.compile(r"^#HARP(?:[ \t\r][^\n]*)?$", re.MULTILINE)
_SPACE = " \t\r\n\v\f"


def find(text: str) -> list[str]:
    """Every ``#HARP`` line of the script, without its line ending."""
    return [m.group(0).rstrip("\r") for m in _HARP_LINE.finditer(text)] if "#HARP" in text else []


def words(line: str) -> list[str]:
    """The words after ``#HARP`` (a trailing ``# comment`` is dropped)."""
    rest = line[len("#HARP") :]
    hash_at = rest.find("#")
    if hash_at >= 0:
        rest = rest[:hash_at]
    return rest.split()


def is_off(lines: list[str]) -> bool:
    """Whether the script opts out: a ``#HARP off`` line (any case)."""
    return any(w[:1] == ["off"] for w in ([x.lower() for x in words(line)] for line in lines))
