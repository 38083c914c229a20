"""Opening a trace file for reading, shared by every trace reader.

One place decides how an unreadable path is reported, so SWF, sacct
exports and sacct JSON all refuse a missing file or a directory with the
same one-line message; and one place reads the text, so every format has
the same progress measure and the same answer to a gzip file cut short.

Why not ``gzip.GzipFile``: it reads the compressed file 128 KiB at a time
and does not say how much of it the decompressor has used, so a progress
bar fed by the file position sticks and then jumps (with a 1 MiB buffer in
front it stuck at 61.9% of a 2.6 MB export).  ``_Gunzip`` feeds zlib small
chunks itself, so ``TraceText.fraction()`` moves through the file in steps
of ``CHUNK`` bytes; zlib still checks each member's CRC and length.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

CHUNK = 16 * 1024  # compressed bytes per read: the progress granularity


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


class _Gunzip(io.RawIOBase):
    """gzip (one or more members) decompressed from ``fh``, ``CHUNK`` compressed bytes at a time.

    Raises EOFError when the file ends inside a member (a truncated copy);
    zlib raises ``zlib.error`` for corrupt data or a wrong CRC.
    """

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self._z: Any = None  # the current member's decompressor; None between members
        self._pending = b""  # compressed bytes read past the end of the last member

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        while True:
            if self._z is not None and self._z.unconsumed_tail:
                data = self._z.decompress(self._z.unconsumed_tail, len(b))
            else:
                chunk = self._pending or self.fh.read(CHUNK)
                self._pending = b""
                if not chunk:
                    if self._z is not None:
                        raise EOFError("compressed file ended before the end-of-stream marker was reached")
                    return 0
                if self._z is None:  # a member starts, or padding after the last one
                    if not chunk.strip(b"\x00"):
                        continue
                    self._z = zlib.decompressobj(wbits=31)
                data = self._z.decompress(chunk, len(b))
            if self._z.eof:  # (zlib leaves a stale unconsumed_tail at the end: drop the object)
                self._pending = self._z.unused_data
                self._z = None
            if data:
                b[: len(data)] = data
                return len(data)

    def close(self) -> None:
        self.fh.close()
        super().close()


class TraceText:
    """A trace file as text (plain or gzip, told by content), with progress and truncation handled.

    ``fraction()`` is the share of the file's bytes read so far (compressed
    bytes for gzip), for progress bars.  ``lines()`` yields the lines; when
    the data breaks off it stops cleanly, drops a last line cut in the middle
    and leaves the one-line reason in ``error`` for the reader to raise once
    it has used what came before.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._raw = open_binary(self.path)
        self.size = os.fstat(self._raw.fileno()).st_size
        self.gzip = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        inner = cast(io.RawIOBase, _Gunzip(self._raw) if self.gzip else self._raw)  # both read into buffers
        stream = io.BufferedReader(inner, buffer_size=CHUNK)
        self.text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
        self.lines_read = 0
        self.error: TraceFormatError | None = None

    def fraction(self) -> float | None:
        if not self.size:
            return None
        try:
            pos = self._raw.tell()
        except (OSError, ValueError):  # closed: the whole file was read
            return 1.0
        return min(1.0, pos / self.size)

    def lines(self, on_cut: Callable[[int], None] | None = None) -> Iterator[str]:
        """The file's lines; a read error ends them (see the class doc).

        One line is held back so that a last line without its newline where
        the data breaks off is never read as a record with half its fields;
        ``on_cut(lineno)`` is told about it.
        """
        prev: str | None = None
        try:
            for line in self.text:
                self.lines_read += 1
                if prev is not None:
                    yield prev
                prev = line
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            cut = isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile))
            what = "gzip data ends or breaks" if cut else "read error"
            todo = (
                "the file is truncated or corrupt (check it with `gzip -t`): copy or download it again"
                if cut
                else "check the disk or copy the file again"
            )
            self.error = TraceFormatError(f"{self.path}:{self.lines_read + 1}: {what} here ({exc}); {todo}")
            if prev is not None:
                if prev.endswith("\n"):
                    yield prev
                elif on_cut is not None:
                    on_cut(self.lines_read)
            return
        finally:
            self.close()
        if prev is not None:
            yield prev

    def close(self) -> None:
        self.text.close()

    def __enter__(self) -> TraceText:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
