"""harp-submit's own ``--harp-...`` options: find them in argv, and refuse the ones harp lacks.

harp's options share the command line with sbatch's and are removed before
sbatch runs.  A misspelt one (``--harp-dryrun``) must never reach sbatch: a
user who asked for a dry run would see a real job, or sbatch's puzzling
"unrecognized option".  So every long option whose name starts with ``harp``
(or is a prefix of ``harp``: ``--ha``, ``--har``; no sbatch option starts with
``ha``) is harp's: one harp knows, or a ``HarpUsage`` error.

Normally argv is read with getopt exactly as sbatch reads it (``CLI_TABLE``),
and only options before the script count.  When that fails (an option
harp's table lacks, a missing value), where the script starts is unknown;
then every harp-like word before a ``--`` counts as harp's.  That errs
towards harp: a dry run asked for anywhere is a dry run.

Standard library only; ``difflib`` is imported only to word an error.
"""

from __future__ import annotations

from .sbatch_options import CLI_TABLE, HARP_OPTION_NAMES, HARP_OPTIONS, GetoptError, OptionTable

HARP_TABLE = OptionTable(HARP_OPTIONS)
DRY_RUN = "harp-dry-run"


class HarpUsage(ValueError):
    """A ``--harp-...`` option harp does not have, or misused: one line for the user, exit 2."""


class HarpArgs:
    """harp's options found in argv, argv without them, and why harp cannot read the rest (if so)."""

    __slots__ = ("names", "argv", "unreadable")

    def __init__(self, names: set[str], argv: list[str], unreadable: str | None):
        self.names = names  # canonical harp option names given
        self.argv = argv  # for sbatch
        self.unreadable = unreadable  # getopt's complaint when argv cannot be read like sbatch reads it


def split(args: list[str], table: OptionTable = CLI_TABLE) -> HarpArgs:
    """harp's options and sbatch's argv; raises HarpUsage for a harp option harp lacks."""
    try:
        parsed = table.parse(args)
    except GetoptError as exc:
        names, argv = _split_loose(args)
        return HarpArgs(names, argv, str(exc))
    mine = [o for o in parsed.options if o.name in HARP_OPTION_NAMES]
    drop = {o.index for o in mine}
    return HarpArgs({o.name for o in mine}, [a for i, a in enumerate(args) if i not in drop], None)


def without_harp_words(args: list[str]) -> list[str]:
    """``args`` with every harp-like option word removed (before ``--``), checking nothing.

    For the last resort after an internal error: whatever else is wrong,
    no ``--harp-...`` word reaches sbatch.
    """
    out: list[str] = []
    options = True
    for a in args:
        if a == "--":
            options = False
        if options and _harp_name(a) is not None:
            continue
        out.append(a)
    return out


def mentions_dry_run(args: list[str]) -> bool:
    """Whether any harp-like word before ``--`` might ask for a dry run (the cautious reading)."""
    for a in args:
        if a == "--":
            return False
        name = _harp_name(a)
        if name is not None and ("dry" in name or (len(name) > len("harp-") and DRY_RUN.startswith(name))):
            return True
    return False


def _harp_name(token: str) -> str | None:
    """The option name of a harp-like word (``--harp-x=1`` -> ``harp-x``), else None."""
    if not token.startswith("--"):
        return None
    name = token[2:].split("=", 1)[0]
    if name.startswith("harp") or (len(name) >= 2 and "harp".startswith(name)):
        return name
    return None


def _split_loose(args: list[str]) -> tuple[set[str], list[str]]:
    """harp's options wherever they are (before ``--``); raises HarpUsage for an unknown one."""
    names: set[str] = set()
    argv: list[str] = []
    options = True
    for a in args:
        if a == "--":
            options = False
        name = _harp_name(a) if options else None
        if name is None:
            argv.append(a)
            continue
        names.add(_resolve(name, a))
    return names, argv


def _resolve(name: str, token: str) -> str:
    """The harp option ``token`` names (getopt's exact-or-unique-prefix rule); HarpUsage otherwise."""
    own = ", ".join("--" + o.name for o in HARP_OPTIONS)
    try:
        spec = HARP_TABLE.lookup_long(name)
    except GetoptError:
        spec = None
    if spec is None:
        matches = [o.name for o in HARP_OPTIONS if o.name.startswith(name)]
        if len(matches) > 1:
            raise HarpUsage(
                f"harp option '--{name}' is ambiguous; harp's options are {own} "
                "(see harp-submit --help); nothing submitted"
            )
        import difflib  # only to word this error

        close = difflib.get_close_matches(name, [o.name for o in HARP_OPTIONS], n=1, cutoff=0.5)
        hint = f"did you mean --{close[0]}? " if close else ""
        raise HarpUsage(f"unknown harp option '--{name}'; {hint}harp's options are {own}; nothing submitted")
    if "=" in token:
        raise HarpUsage(f"harp option '--{spec.name}' takes no value (got '{token}'); nothing submitted")
    return spec.name
