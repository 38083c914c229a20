"""No Slurm output that holds users' text is split by lines or separators anywhere in harpd (#44).

Job names, comments and paths are written by users, and Slurm's text output
prints them unquoted: a reader that splits such output by lines or ``|``
takes a user's line break for the end of a record and the text after it for
Slurm's word (#44: a newline in a comment made root harpd adopt another
user's job).  Jobs are read from Slurm's JSON (``harpd.slurm.squeue_json``,
``harpd.slurm.sacct_json``).  Only ``harpd.slurm`` runs Slurm's commands (the
``slurm-only`` import contract), so every split by lines or separators in that
package is listed here with what it splits and why that text holds no user
text, or is one job's own text read whole; a new one fails this test until it
is justified here.  The test proves on a scratch source that it catches one.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SLURM = REPO / "harpd" / "slurm"

#: (module, function) -> what it splits, and why no user's text can pass for Slurm's there
ALLOWED = {
    ("cli_backend", "_first_line"): "an error's first line (stderr), for a message only",
    ("cli_backend", "_after_banner"): "one job's own script or environment, asked of that job alone, read whole",
    ("cli_backend", "parse_env_lines"): "one job's own environment, for that job's own resubmission as its owner",
    ("cli_backend", "_record_ids"): "squeue -o %A: job ids, no text",
    ("cli_backend", "_job_record"): "a Slurm without JSON: one job's record, its line count checked against ids",
    ("cli_backend", "held_jobs"): "a Slurm without JSON: scontrol's listing, every record checked (job_record)",
    ("cli_backend", "jobs_with_comment"): "a Slurm without JSON: squeue %A and sacct JobIDRaw, ids only",
    ("cli_backend", "partitions"): "scontrol show partition/node: the admin's configuration",
    ("cli_backend", "_config"): "scontrol show config: the admin's configuration",
    ("billing", "partition_billing"): "scontrol show partition: the admin's configuration",
    ("sacct_text", "parse_parsable2"): "sacct -P of LIVE_PARSABLE2_COLUMNS: no JobName, no Comment",
    ("sacct_text", "iter_parsable2"): "sacct -P rows of the live columns, or an admin's exported history file",
    ("sacct_text", "owners_of_parsable"): "sacct -P JobIDRaw|User|UID: ids and login names",
}

_SEPARATORS = {"\n", "\r\n", "|", "\r"}


def splits(source: str) -> set[tuple[str, int]]:
    """(enclosing function, line) of every split of text by lines or Slurm's separators in ``source``."""
    tree = ast.parse(source)
    found: set[tuple[str, int]] = set()

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                attr = child.func.attr
                first = child.args[0] if child.args else None
                by_sep = (
                    attr in ("split", "rsplit", "partition", "rpartition")
                    and isinstance(first, ast.Constant)
                    and first.value in _SEPARATORS
                )
                if attr == "splitlines" or by_sep:
                    found.add((func, child.lineno))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_every_split_of_slurm_output_is_justified() -> None:
    unjustified = []
    for path in sorted(SLURM.glob("*.py")):
        for func, line in splits(path.read_text()):
            if (path.stem, func) not in ALLOWED:
                unjustified.append(f"harpd/slurm/{path.name}:{line} in {func}()")
    assert not unjustified, (
        "Slurm output split by lines or '|' outside the reviewed readers (read jobs from Slurm's JSON, "
        "or justify the split in ALLOWED): " + ", ".join(unjustified)
    )


def test_every_allowed_split_still_exists() -> None:
    """An entry whose split is gone is stale: the list says what is true."""
    present = {(p.stem, f) for p in SLURM.glob("*.py") for f, _ in splits(p.read_text())}
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)


def test_the_check_catches_a_new_split() -> None:
    bad = (
        "def jobs_by_comment(backend):\n"
        "    out = backend._run('squeue', ['-o', '%i|%k'])\n"
        "    return [ln.partition('|') for ln in out.splitlines()]\n"
    )
    assert {f for f, _ in splits(bad)} == {"jobs_by_comment"}
    assert ("cli_backend", "jobs_by_comment") not in ALLOWED
    assert splits("def f(t):\n    return t.split(',')\n") == set()  # a comma list of the admin's is not flagged
