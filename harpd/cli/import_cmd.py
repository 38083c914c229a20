"""``harp import FILE``: load job history (SWF, sacct -P export, sacct --json) into the store."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC
from pathlib import Path

from harpd.cli.main import CliError, open_store, settings_of

NAME = "import"
HELP = "load a job history file (SWF, sacct --parsable2 export, sacct --json; gzip or plain) into the store"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="trace file; the format is recognised from its content")
    parser.add_argument("--source", help="name the records' source (default: the file name without suffixes)")
    parser.add_argument("--db", help="store to write (default: store.path from the config)")
    parser.add_argument("--batch-size", type=int, default=20_000, help="records per transaction (default 20000)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    parser.add_argument(
        "--start",
        metavar="DATE",
        help="when an SWF trace begins, to place its jobs in time: an ISO date (2012-01-01, UTC "
        "unless it names a zone) or epoch seconds; replaces the file's UnixStartTime header",
    )


def parse_start(text: str) -> float:
    """``--start``: epoch seconds, or an ISO date/time (UTC when it names no zone)."""
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(
            f"--start {text!r}: not a date; give an ISO date such as 2012-01-01 "
            "(or 2012-01-01T08:00+01:00) or epoch seconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def run(args: argparse.Namespace) -> int:
    from harpd.ingest.importer import ImportFailed, import_file
    from harpd.store import StoreError
    from harpd.traces import TraceFormatError, read_trace

    if args.batch_size < 1:
        raise CliError("--batch-size must be at least 1")
    start = None if args.start is None else parse_start(args.start)
    path = Path(args.file)
    if not path.exists():
        raise CliError(f"{path}: no such file")
    if path.is_dir():
        raise CliError(f"{path}: is a directory; give a trace file")
    if args.db:
        db = Path(args.db)
    else:
        db = settings_of(args).store.path
    try:
        reader = read_trace(path, args.source, start)  # a file refused here never opens (or creates) the store
    except TraceFormatError as exc:
        raise CliError(f"{exc}") from None
    store = open_store(db)
    try:
        summary = import_file(
            path,
            store,
            args.source,
            reader=reader,
            batch_size=args.batch_size,
            progress=False if args.no_progress else None,
            stream=sys.stderr,
            start=start,
        )
    except ImportFailed as exc:
        raise CliError(str(exc)) from None
    except TraceFormatError as exc:
        raise CliError(f"{exc}") from None
    except StoreError as exc:
        raise CliError(str(exc)) from None
    finally:
        store.close()
    for warning in summary.warnings:
        print(f"harp: warning: {warning}", file=sys.stderr)
    gaps = summary.gaps()
    if gaps:
        print(f"harp: warning: {gaps}", file=sys.stderr)
    if not summary.records and not summary.skipped:
        print(f"harp: warning: {path}: no job rows, nothing imported; is it the export you meant?", file=sys.stderr)
    print(summary.line())
    if summary.skipped:
        print(f"harp: {summary.skipped:,} bad rows skipped; the first:", file=sys.stderr)
        for e in summary.errors:
            print(f"  {e}", file=sys.stderr)
    return 0
