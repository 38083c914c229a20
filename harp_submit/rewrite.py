"""Apply a checked decision where each value lives: script, environment or command line.

sbatch's own precedence decides where a change must go.  For every change
harp looks up the setting that currently wins (command line over environment
over ``#SBATCH`` line) and replaces that one in place, so the changed value
is the one sbatch will use and nothing else moves.  A value the user never
set becomes a new ``#SBATCH`` line after the last directive (or an option on
the command line for ``--wrap`` jobs, which have no script to edit).

``--mem``, ``--mem-per-cpu`` and ``--mem-per-gpu`` are one family (sbatch
refuses two of them together): a memory change replaces whichever member the
user set, under the new option's name.

After editing, the result is read back exactly as sbatch will read it and
compared with the decision; any mismatch raises ``RewriteError`` and the
caller submits the original instead.
"""

from __future__ import annotations

from . import directives
from .decision import Change
from .request import CLI, ENV, MEMORY_OPTIONS, Request
from .sbatch_options import OPTION_ENV, SBATCH_TABLE, ParsedOption

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Mapping


class RewriteError(ValueError):
    """The decision could not be applied cleanly (one line for the user)."""


class Applied:
    """One change as made: the option, its old and new value, and where."""

    __slots__ = ("change", "old_option", "old_value", "where")

    def __init__(self, change: Change, old_option: str | None, old_value: str | None, where: str):
        self.change = change
        self.old_option = old_option
        self.old_value = old_value
        self.where = where

    def describe(self) -> str:
        """``--time 2-00:00:00 -> 01:30:00 (#SBATCH line; 95th percentile of 37 similar runs)``"""
        c = self.change
        if self.old_option is None:
            head = f"--{c.option} (not set) -> {c.value}"
        elif self.old_option != c.option:
            head = f"--{self.old_option}={self.old_value} -> --{c.option}={c.value}"
        else:
            head = f"--{c.option} {self.old_value} -> {c.value}"
        why = f"; {c.reason}" if c.reason else ""
        return f"{head} ({self.where}{why})"


class Rewritten:
    """What sbatch should get: argv, environment, and the script text."""

    __slots__ = ("argv", "environ", "script_text", "applied", "script_changed", "argv_changed", "env_changed")

    def __init__(
        self,
        argv: list[str],
        environ: dict[str, str],
        script_text: str | None,
        applied: list[Applied],
        original: Request,
    ):
        self.argv = argv
        self.environ = environ
        self.script_text = script_text
        self.applied = applied
        self.script_changed = script_text != original.script_text
        self.argv_changed = False
        self.env_changed = False


def build(argv: list[str], environ: Mapping[str, str], template: Request, script_text: str | None) -> Request:
    """A Request read from these argv/environment/script, like sbatch will read them."""
    script = directives.parse(script_text) if script_text is not None else None
    return Request(
        SBATCH_TABLE.parse(argv),
        environ,
        script,
        script_path=template.script_path,
        script_text=script_text,
        wrap=template.wrap,
        harp_lines=template.harp_lines,
    )


def apply(request: Request, argv: list[str], changes: list[Change]) -> Rewritten:
    """Apply ``changes`` to the submission ``request`` was read from (``argv`` without harp options)."""
    original_argv = list(argv)
    argv = list(argv)
    environ = dict(request.environ)
    text = request.script_text
    applied: list[Applied] = []
    current = request
    for change in changes:
        family = MEMORY_OPTIONS if change.option in MEMORY_OPTIONS else (change.option,)
        occ = current.effective(*family)
        if occ is None:
            if text is not None:
                script = directives.parse(text)
                directives.insert_directive(script, change.option, change.value)
                text = script.render()
                where = "new #SBATCH line"
            else:
                cli = SBATCH_TABLE.parse(argv)
                at = cli.dashdash if cli.dashdash is not None else cli.end
                argv.insert(at, f"--{change.option}={change.value}")
                where = "added to the command line"
            applied.append(Applied(change, None, None, where))
        elif occ.source == CLI:
            assert occ.option is not None
            _replace_in_argv(argv, occ.option, change.option, change.value)
            applied.append(Applied(change, occ.name, occ.value, "command line"))
        elif occ.source == ENV:
            assert occ.env_var is not None
            var = OPTION_ENV[change.option]
            if var != occ.env_var:
                del environ[occ.env_var]
            environ[var] = change.value
            applied.append(Applied(change, occ.name, occ.value, f"${occ.env_var}"))
        else:
            assert current.script is not None and occ.option is not None and text is not None
            # edit a fresh parse of the same text (same tokens): the caller's Request keeps its script
            script = directives.parse(text)
            directives.replace_option(script, occ.option, change.option, change.value)
            text = script.render()
            applied.append(Applied(change, occ.name, occ.value, "#SBATCH line"))
        current = build(argv, environ, request, text)
    _verify(current, changes)
    out = Rewritten(argv, environ, text, applied, request)
    out.argv_changed = argv != original_argv
    out.env_changed = environ != dict(request.environ)
    return out


def _verify(after: Request, changes: list[Change]) -> None:
    """Read the result back as sbatch will, and insist that it says what was decided."""
    if after.script is not None and (after.script.error or after.script.hetjob):
        raise RewriteError(f"the rewritten script would not parse ({after.script.error})")
    for c in changes:
        family = MEMORY_OPTIONS if c.option in MEMORY_OPTIONS else (c.option,)
        occ = after.effective(*family)
        if occ is None or occ.name != c.option or occ.value != c.value:
            got = f"--{occ.name}={occ.value}" if occ else "nothing"
            raise RewriteError(f"--{c.option}={c.value} did not take effect (sbatch would read {got})")
        if c.option in MEMORY_OPTIONS:
            for o in after.occurrences:
                if o.name in MEMORY_OPTIONS and o.name != c.option and o.source != ENV:
                    raise RewriteError(f"--{o.name} ({o.where()}) would conflict with --{c.option}")


def _replace_in_argv(argv: list[str], opt: ParsedOption, name: str, value: str) -> None:
    """Set the command-line option ``opt`` to ``--name=value`` in place, keeping the user's spelling."""
    same = opt.name == name
    if opt.value_index is not None:
        argv[opt.value_index] = value
        if not same:
            lead = opt.cluster_lead(argv[opt.index])
            argv[opt.index : opt.index + 1] = [lead, f"--{name}"] if lead else [f"--{name}"]
        return
    if opt.value_start is None:
        raise RewriteError(f"{opt.spelled} has no value to replace")
    tok = argv[opt.index]
    if same:
        argv[opt.index] = tok[: opt.value_start] + value
    else:
        lead = opt.cluster_lead(tok[: opt.value_start])
        argv[opt.index : opt.index + 1] = [lead, f"--{name}={value}"] if lead else [f"--{name}={value}"]
