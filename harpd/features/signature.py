"""Normalised command signature: "which program does this script run".

Two submissions of the same workflow differ in numbers (seeds, step counts,
file indices, node counts) but run the same programs; their resource use is
what history should share.  The signature keeps the program names and the
shape of their arguments, strips numbers, paths to directories and shell
noise, and hashes the result so it is short and carries no file contents.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from harpd.features.launchers import LAUNCHERS, program_start

# commands that only prepare the environment: they say nothing about the work
_NOISE = {
    "cd",
    "export",
    "module",
    "ml",
    "source",
    ".",
    "echo",
    "set",
    "unset",
    "printf",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "ln",
    "touch",
    "cat",
    "date",
    "hostname",
    "sleep",
    "conda",
    "activate",
    "deactivate",
    "ulimit",
    "umask",
    "wait",
    "true",
    "false",
    "exit",
    "trap",
    "shopt",
    "alias",
    "pwd",
    "env",
    "nvidia-smi",
    "sync",
    "exec",
    "if",
    "then",
    "else",
    "fi",
    "for",
    "do",
    "done",
    "while",
    "case",
    "esac",
    "[",
    "[[",
    "test",
    "local",
    "declare",
    "eval",
    "return",
    "ls",
    "tee",
    "scontrol",
}
_INTERPRETERS = {"python", "python3", "python2", "perl", "Rscript", "R", "julia", "ruby", "node", "java"}
_NUM = re.compile(r"\d+(\.\d+)?([eE][-+]?\d+)?")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _split(text: str) -> list[str]:
    """Shell words of ``text``; whitespace-separated where quotes do not balance (a truncated command)."""
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def _program(tokens: list[str]) -> str | None:
    """The program a command line runs, plus the script for interpreters."""
    i = 0
    n = len(tokens)
    while i < n:
        t = tokens[i]
        base = t.rsplit("/", 1)[-1]
        if _ASSIGN.match(t):  # VAR=value prefix
            i += 1
            continue
        if base in ("bash", "sh") and "-c" in tokens[i + 1 : i + 3]:
            # bash -c 'COMMAND': the program is inside the string
            k = tokens.index("-c", i + 1)
            return _program(_split(tokens[k + 1])) if k + 1 < n else None
        if base in LAUNCHERS:
            i = program_start(tokens, i)
            continue
        if base in _NOISE:
            return None
        base = _NUM.sub("#", base)
        if base.rstrip("#.") in _INTERPRETERS or base.startswith("python"):
            # the script or module decides what runs: python -m pkg / python x.py
            j = i + 1
            while j < n and tokens[j].startswith("-") and not tokens[j].startswith("-m"):
                # -W/-X take a value (python -W ignore -X dev x.py); -c runs inline code, no script
                if tokens[j] == "-c":
                    return base.rstrip("#.") + " -c"
                j += 2 if tokens[j] in ("-W", "-X", "-Q") else 1
            if j < n and tokens[j].startswith("-m") and len(tokens[j]) > 2:  # python -mpkg
                return f"{base.rstrip('#.')} -m {_NUM.sub('#', tokens[j][2:])}"
            if j < n and tokens[j] == "-m" and j + 1 < n:
                return f"{base.rstrip('#.')} -m {_NUM.sub('#', tokens[j + 1])}"
            if j < n:
                return f"{base.rstrip('#.')} {_NUM.sub('#', tokens[j].rsplit('/', 1)[-1])}"
            return base.rstrip("#.")
        return base
    return None


def normalise_commands(commands: list[str] | str) -> str:
    """The readable normal form: programs in order, one per command, deduplicated."""
    text = commands if isinstance(commands, str) else "\n".join(commands)
    progs: list[str] = []
    for raw in text.replace("\r", "").split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
            part = part.strip().rstrip("&").strip()
            if not part:
                continue
            tokens = _split(part)
            if not tokens:
                continue
            prog = _program(tokens)
            if prog and (not progs or progs[-1] != prog):
                progs.append(prog)
    return " | ".join(progs)


def signature_of(commands: list[str] | str) -> str:
    """A short stable id of the normalised commands (``sig:`` + 16 hex digits).

    Scripts that run nothing recognisable get ``sig:empty`` so they still
    group together rather than each becoming its own cold start.
    """
    norm = normalise_commands(commands)
    if not norm:
        return "sig:empty"
    return "sig:" + hashlib.sha1(norm.encode("utf-8")).hexdigest()[:16]
