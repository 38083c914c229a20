"""``#HARP ...`` lines: the script's own instructions to harp.

sbatch ignores them (they are shell comments and not ``#SBATCH``), so users
can put them anywhere in the script.  ``#HARP off`` opts the script out of
any rewrite; other lines (``#HARP dnn model=... gpus=...``) travel to harpd
verbatim in ``JobRequest.harp_lines`` for it to interpret.
"""

from __future__ import annotations

_MARK = "#HARP"


def find(text: str) -> list[str]:
    """Every ``#HARP`` line of the script (at column 0, like ``#SBATCH``), without its line ending.

    ``#HARPOON`` is not ours: the mark must be followed by a blank or the end
    of the line.  (Plain string scanning: ``re`` costs milliseconds to import.)
    """
    out: list[str] = []
    pos = text.find(_MARK)
    while pos >= 0:
        if pos == 0 or text[pos - 1] == "\n":
            end = text.find("\n", pos)
            line = text[pos:] if end < 0 else text[pos:end]
            line = line.rstrip("\r")
            if len(line) == len(_MARK) or line[len(_MARK)] in " \t\r":
                out.append(line)
        pos = text.find(_MARK, pos + 1)
    return out


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


_RETRY_OFF = frozenset({"off", "no", "false", "0", "never"})


def retry_choice(lines: list[str] | None) -> bool | None:
    """True for ``#HARP retry``, False for ``#HARP retry off``/``#HARP noretry``,
    None when the script says nothing; the last such line wins."""
    choice: bool | None = None
    for line in lines or []:
        w = [x.lower() for x in words(str(line))]
        if not w:
            continue
        if w[0] == "noretry":
            choice = False
        elif w[0] == "retry":
            choice = not (len(w) > 1 and w[1] in _RETRY_OFF)
    return choice
