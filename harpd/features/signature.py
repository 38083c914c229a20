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
# launchers and wrappers: the program that matters comes after them
_LAUNCHERS = {
    "srun",
    "mpirun",
    "mpiexec",
    "time",
    "nohup",
    "stdbuf",
    "numactl",
    "taskset",
    "apptainer",
    "singularity",
    "torchrun",
    "accelerate",
    "deepspeed",
    "nice",
    "ibrun",
    "aprun",
    "timeout",
    "xargs",
    "parallel",
    "env",
    "bash",
    "sh",
    "exec",
}
_INTERPRETERS = {"python", "python3", "python2", "perl", "Rscript", "R", "julia", "ruby", "node", "java"}
_NUM = re.compile(r"\d+(\.\d+)?([eE][-+]?\d+)?")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


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
        if base in _LAUNCHERS:
            i += 1
            # skip the launcher's options (and an option's value when it is a number/short token)
            while i < n and tokens[i].startswith("-"):
                opt = tokens[i]
                i += 1
                if (
                    "=" not in opt
                    and i < n
                    and not tokens[i].startswith("-")
                    and (_NUM.fullmatch(tokens[i]) or len(opt) == 2)
                ):
                    i += 1
            if base in ("apptainer", "singularity") and i < n:
                i += 2  # "exec image.sif"
            continue
        if base in _NOISE:
            return None
        base = _NUM.sub("#", base)
        if base.rstrip("#.") in _INTERPRETERS or base.startswith("python"):
            # the script or module decides what runs: python -m pkg / python x.py
            j = i + 1
            while j < n and tokens[j].startswith("-") and tokens[j] != "-m":
                j += 1
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
            try:
                tokens = shlex.split(part, comments=True)
            except ValueError:  # unbalanced quotes: fall back to whitespace
                tokens = part.split()
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
