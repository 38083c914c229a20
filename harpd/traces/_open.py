"""Opening a trace file for reading, shared by every trace reader.

One place decides how an unreadable path is reported, so SWF, sacct
exports and sacct JSON all refuse a missing file or a directory with the
same one-line message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO


class TraceFormatError(ValueError):
    """A trace line harp cannot read; the message names file, line and problem."""


def open_binary(path: str | os.PathLike[str]) -> BinaryIO:
    """The file opened ``rb``; a missing, directory or unreadable path raises TraceFormatError."""
    p = Path(path)
    try:
        return p.open("rb")
    except FileNotFoundError:
        raise TraceFormatError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{p}: is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read ({exc.strerror})") from None
