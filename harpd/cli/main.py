"""Entry point of ``harp``: builds the argument parser from the subcommand modules.

Each subcommand lives in its own module in this package and exposes
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.  Adding a
subcommand is one module plus one line in ``SUBCOMMANDS``; modules are imported
lazily so ``harp dnn estimate`` does not pay for scikit-learn.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harp_submit import __version__

if TYPE_CHECKING:  # the config is imported when a command needs it: `harp --help` stays quick
    from harpd.config import HarpSettings

# subcommand name -> module (relative to harpd.cli)
SUBCOMMANDS: dict[str, str] = {
    "dnn": "dnn_cmd",
    "health": "health_cmd",
    "import": "import_cmd",
    "progress": "progress_cmd",
    "reload": "reload_cmd",
    "replay": "replay_cmd",
    "report": "report_cmd",
    "retrain": "retrain_cmd",
    "status": "status_cmd",
}


CONFIG_HELP = "harpd.toml to use (default: HARP_CONFIG, else /etc/harp/harpd.toml); before or after the subcommand"


class CliError(Exception):
    """An error for the user: printed as one ``harp: ...`` line, exit ``exit_code`` (2: usage)."""

    exit_code = 2


def settings_of(args: argparse.Namespace) -> HarpSettings:
    """The config ``--config`` names (else HARP_CONFIG / the default); a bad one is a CliError."""
    from harpd.config import ConfigError, load_settings

    try:
        return load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def store_problem(db: Any, hint: bool = True) -> str | None:
    """Why this user cannot read the store at ``db`` itself, else None.

    ``harp status`` and ``harp report`` both say these words, so the same
    unreadable store reads the same from either.  Opening needs write access
    too (SQLite in WAL mode), to the file and its directory.  ``hint``: say
    what to do about a missing store (left out where harpd's absence is said too).
    """
    from pathlib import Path

    path = Path(db)
    try:
        os.stat(path)
    except FileNotFoundError:
        return f"cannot open the store {path} (no such file)" + (
            "; run `harp import` or start harpd first, or pass --db PATH" if hint else ""
        )
    except OSError as exc:
        return f"cannot open the store {path} ({(exc.strerror or str(exc)).lower()})"
    if os.path.isdir(path):
        return f"{path} is a directory; pass the store file to --db"
    if not (os.access(path, os.R_OK | os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
        return f"cannot open the store {path} (permission denied)"
    return None


def no_store_no_daemon(problem: str, unreachable: object) -> str:
    """The one line when harpd cannot be asked and the store cannot be read either (status and report)."""
    return f"{problem}, and {unreachable}; start harpd, or run as root / an admin with --db PATH"


def open_store(db: Any) -> Any:
    """The store at ``db``, for a subcommand that reads or writes it itself; a CliError saying why not."""
    from harpd.store import Store, StoreError

    try:
        return Store.open(db)
    except StoreError as exc:
        raise CliError(str(exc)) from None


def _build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, ModuleType | None]:
    parser = argparse.ArgumentParser(prog="harp", description="harp admin CLI")
    parser.add_argument("--version", action="version", version=f"harp {__version__}")
    parser.add_argument("--config", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # only import the module of the chosen subcommand (fast start, fewer deps)
    chosen = None
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--config":
            skip = True
        elif not a.startswith("-"):
            chosen = a
            break
    module = None
    for name, modname in SUBCOMMANDS.items():
        if name == chosen:
            module = importlib.import_module(f"harpd.cli.{modname}")
            p = sub.add_parser(name, help=module.HELP, description=module.HELP)
            module.add_arguments(p)
            # `harp report --config x.toml` as well as `harp --config x.toml report`;
            # SUPPRESS: absent here, the value given before the subcommand stays
            p.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
        elif chosen is None:
            # no subcommand: the overview lists them all, so read each one's line (HELP stays in its module)
            other = importlib.import_module(f"harpd.cli.{modname}")
            sub.add_parser(name, help=other.HELP, add_help=False)
        else:
            sub.add_parser(name, add_help=False)
    return parser, module


def attach_dash_values(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``-S -5d`` read as getopt (sacct) reads it: the word after an option that takes a value is
    its value, even when it starts with ``-``; argparse would take ``-5d`` for an option.

    ``options``: a subcommand's ``DASH_VALUES``, options whose values may start with ``-``.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        if a in options and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] != "--":
            out.append(f"{a}={argv[i + 1]}" if a.startswith("--") else a + argv[i + 1])
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, module = _build_parser(argv)
    if module is not None:
        argv = attach_dash_values(argv, getattr(module, "DASH_VALUES", ()))
    args = parser.parse_args(argv)
    if module is None:
        parser.print_help()
        return 2
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # inside the try: a reader that left shows here, not at interpreter exit
        return code
    except CliError as exc:
        print(f"harp: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("harp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `harp ... | head`: the reader left, which is not an error of harp's; say nothing
        # and keep Python from complaining again when it flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    # run as ``python -m harpd.cli.main``: this file is ``__main__``, while the subcommands raise the
    # package module's CliError; its main catches those (this copy's would not: a traceback)
    from harpd.cli.main import main as package_main

    sys.exit(package_main())
