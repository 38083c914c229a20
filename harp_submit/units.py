"""Slurm's time and memory formats, parsed and formatted exactly as Slurm does.

harp-submit must agree with sbatch about every value it reads: a value sbatch
rejects has to reach sbatch untouched (so the user sees sbatch's own error), and
a value sbatch accepts must mean the same number to harp.  So the parsers below
mirror Slurm 22.05's C functions (``time_str2secs``/``time_str2mins`` in
src/common/parse_time.c, ``str_to_mbytes`` and ``verify_node_count`` in
src/common/proc_args.c, ``parse_int``), including their odd corners (``"0"``
means no limit, ``"5GB"`` is accepted, ``"5 "`` is not).  The unit tests check
them against the installed libslurmfull where it exists.

Accounting prints values in other forms than sbatch reads: ``sacct`` and
``scontrol`` show fractional sizes (``1.50G``), sizes in bytes (a bare MaxRSS),
fractional seconds (``00:01.234``), a bare number as seconds rather than
minutes, and words (``UNLIMITED``, ``Partition_Limit``).  Those are read by
``parse_duration_s`` and ``parse_size_mb`` below, kept apart from the sbatch
parsers because the two grammars disagree (``"5"`` is five minutes to sbatch,
five seconds in sacct's ``Elapsed``).

Pure functions, standard library only: harpd reads and writes Slurm's time
and memory values through this module too, so there is one grammar of each.
"""

from __future__ import annotations

import math

__all__ = [
    "INFINITE",
    "NO_VAL",
    "time_str2secs",
    "time_str2mins",
    "parse_time",
    "format_time",
    "str_to_mbytes",
    "parse_mem",
    "format_mem",
    "fmt_time",
    "fmt_mem",
    "parse_int",
    "parse_nodes",
    "parse_duration_s",
    "parse_size_mb",
    "parse_size_mb_per",
]

#: Slurm's sentinels as C ``int`` (``0xffffffff`` and ``0xfffffffe``).
INFINITE = -1
NO_VAL = -2
_NO_VAL64 = 0xFFFFFFFFFFFFFFFE

_INT32_MOD = 1 << 32
_INT64_MOD = 1 << 64
_LONG_MAX = (1 << 63) - 1
_LONG_MIN = -(1 << 63)

_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_DIGITS = "0123456789"


def _int32(v: int) -> int:
    """Wrap to a C int, as the C code's arithmetic does on overflow."""
    v %= _INT32_MOD
    return v - _INT32_MOD if v >= (1 << 31) else v


def _int64(v: int) -> int:
    v %= _INT64_MOD
    return v - _INT64_MOD if v >= (1 << 63) else v


def _strtol(s: str, pos: int = 0) -> tuple[int, int, bool]:
    """C ``strtol(s + pos, &end, 10)``: (value, end index, overflowed).

    end == pos when no digits were read (C sets endptr back to the start).
    """
    i = pos
    n = len(s)
    while i < n and s[i] in _SPACE:
        i += 1
    neg = False
    if i < n and s[i] in "+-":
        neg = s[i] == "-"
        i += 1
    start = i
    while i < n and s[i] in _DIGITS:
        i += 1
    if i == start:
        return 0, pos, False
    v = int(s[start:i])
    if neg:
        v = -v
    if v > _LONG_MAX:
        return _LONG_MAX, i, True
    if v < _LONG_MIN:
        return _LONG_MIN, i, True
    return v, i, False


def _sscanf_int(s: str, i: int) -> tuple[int | None, int]:
    """One ``%d`` of glibc sscanf: optional sign, digits, clamp to long, cut to int."""
    n = len(s)
    while i < n and s[i] in _SPACE:
        i += 1
    j = i
    if j < n and s[j] in "+-":
        j += 1
    k = j
    while k < n and s[k] in _DIGITS:
        k += 1
    if k == j:
        return None, i
    v = int(s[i:k])
    v = max(_LONG_MIN, min(_LONG_MAX, v))
    return _int32(v), k


def _sscanf(s: str, fmt: list[str]) -> list[int]:
    """Tiny sscanf for formats made of ``%d`` and literal characters."""
    out: list[int] = []
    i = 0
    for piece in fmt:
        if piece == "%d":
            v, i = _sscanf_int(s, i)
            if v is None:
                break
            out.append(v)
        else:
            if i < len(s) and s[i] == piece:
                i += 1
            else:
                break
    return out


def _is_valid_timespec(s: str) -> bool:
    digit = dash = colon = 0
    already_digit = False
    for ch in s:
        if ch in _DIGITS:
            if not already_digit:
                digit += 1
                already_digit = True
        elif ch == "-":
            already_digit = False
            dash += 1
            if colon:
                return False
        elif ch == ":":
            already_digit = False
            colon += 1
        else:
            return False
    if not digit or dash > 1 or colon > 2:
        return False
    if dash:
        if colon == 1 and digit < 3:
            return False
        if colon == 2 and digit < 4:
            return False
    else:
        if colon == 1 and digit < 2:
            return False
        if colon == 2 and digit < 3:
            return False
    return True


def time_str2secs(s: str) -> int:
    """Slurm's ``time_str2secs``: seconds, ``INFINITE`` or ``NO_VAL`` (invalid)."""
    if not s:
        return NO_VAL
    if s.lower() in ("-1", "infinite", "unlimited"):
        return INFINITE
    if not _is_valid_timespec(s):
        return NO_VAL
    d = h = m = sec = 0
    if "-" in s:
        vals = _sscanf(s, ["%d", "-", "%d", ":", "%d", ":", "%d"])
        vals += [0] * (4 - len(vals))
        d, h, m, sec = vals
        d = _int32(d * 86400)
        h = _int32(h * 3600)
        m = _int32(m * 60)
    else:
        vals = _sscanf(s, ["%d", ":", "%d", ":", "%d"])
        if len(vals) == 3:
            h, m, sec = vals
            h = _int32(h * 3600)
            m = _int32(m * 60)
        else:
            vals += [0] * (3 - len(vals))
            h, m, _ = vals
            sec = m
            m = _int32(h * 60)
            h = 0
    return _int32(d + h + m + sec)


def time_str2mins(s: str) -> int:
    """Slurm's ``time_str2mins``: minutes rounded up, ``INFINITE`` or ``NO_VAL``."""
    i = time_str2secs(s)
    if i not in (INFINITE, NO_VAL):
        i = _cdiv(_int32(i + 59), 60)
    return i


def parse_time(s: str) -> int | None:
    """The time limit sbatch applies for ``--time=s``, in seconds.

    ``None`` means no limit (``UNLIMITED``, ``INFINITE``, ``-1`` and also ``0``,
    which sbatch turns into no limit).  Raises ValueError for what sbatch
    rejects, and also for negative limits, which sbatch accepts but turns into
    an INVALID limit that harp has no business right-sizing.
    """
    mins = time_str2mins(s)
    if mins == NO_VAL:
        raise ValueError(f"invalid time limit {s!r}")
    if mins == INFINITE or mins == 0:
        return None
    if mins < 0:
        raise ValueError(f"negative time limit {s!r}")
    return mins * 60


SIGNAL_LEAD_DEFAULT_S = 60  # sbatch's sig_time when --signal has no "@N"
# the names Slurm's sig_name2num knows (any case, "SIG" optional); numbers: any positive one
_SIGNAL_NAMES = frozenset("HUP INT QUIT ABRT KILL ALRM TERM USR1 USR2 URG CONT STOP TSTP TTIN TTOU".split())
# sbatch casts strtol's long to int: a larger number would wrap, so harp leaves it to sbatch untouched
_SIGNAL_NUMBER_MAX = 2**31 - 1


def _ascii_digits(text: str) -> bool:
    """Digits as C reads them: str.isdigit also takes "²" and fullwidth digits, which Slurm refuses."""
    return text.isascii() and text.isdigit()


def parse_signal_lead(s: str) -> int:
    """How many seconds before the end of its time ``--signal=[{R|B}:]SIG[@N]`` signals a job.

    As sbatch's ``get_signal_opts``: an optional ``B:``/``R:`` prefix, a
    signal number or name, and ``@N`` seconds (0 to 65535, 60 when absent).
    Raises ValueError for what sbatch rejects.
    """
    text = s
    head, sep, rest = text.partition(":")
    if sep and head and set(head.upper()) <= {"R", "B"} and len(head) <= 2:
        text = rest
    sig, at, lead = text.partition("@")
    name = sig.upper().removeprefix("SIG")
    if not (_ascii_digits(sig) and 0 < int(sig) <= _SIGNAL_NUMBER_MAX) and name not in _SIGNAL_NAMES:
        raise ValueError(f"invalid signal in --signal {s!r}")
    if not at:
        return SIGNAL_LEAD_DEFAULT_S
    if not _ascii_digits(lead) or int(lead) > 0xFFFF:
        raise ValueError(f"invalid signal time in --signal {s!r}")
    return int(lead)


def format_time(seconds: int | None) -> str:
    """Slurm's own rendering (``secs2time_str``): ``D-HH:MM:SS`` or ``HH:MM:SS``.

    ``None`` renders as ``UNLIMITED``.  Seconds are kept: sbatch rounds them up
    to whole minutes itself.
    """
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        raise ValueError(f"negative time {seconds}")
    seconds = int(seconds)
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _cdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def str_to_mbytes(s: str) -> int:
    """Slurm's ``str_to_mbytes``: MiB as an unsigned 64-bit value, NO_VAL64 if invalid."""
    result, end, overflow = _strtol(s)
    if overflow or end == 0 or result < 0:
        return _NO_VAL64
    rest = s[end:]
    if rest:
        unit, tail = rest[0], rest[1:]
        if tail not in ("", "B", "b"):
            return _NO_VAL64
        if unit in "kK":
            result = _cdiv(_int64(result + 1023), 1024)
        elif unit in "mM":
            pass
        elif unit in "gG":
            result = _int64(result * 1024)
        elif unit in "tT":
            result = _int64(result * 1024 * 1024)
        else:
            return _NO_VAL64
    return result % _INT64_MOD


def parse_mem(s: str) -> int:
    """MiB for a memory value as sbatch reads it (``--mem``, ``--mem-per-cpu``...).

    Units K, M, G, T (optionally followed by B), default M; K rounds up.
    ``0`` is valid (``--mem=0``: all the memory of the node).  Raises
    ValueError for what sbatch rejects.
    """
    v = str_to_mbytes(s)
    if v == _NO_VAL64:
        raise ValueError(f"invalid memory size {s!r}")
    return v


def format_mem(mb: int) -> str:
    """The shortest exact sbatch spelling of ``mb`` MiB: ``4G``, ``1500M``, ``2T``."""
    mb = int(mb)
    if mb < 0:
        raise ValueError(f"negative memory {mb}")
    if mb and mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T"
    if mb and mb % 1024 == 0:
        return f"{mb // 1024}G"
    return f"{mb}M"


def fmt_time(seconds: float | None) -> str:
    """Seconds as harpd's reasons and ``harp status`` say them: ``2 min``, ``1:30:00``, ``2-00:00:00``.

    Not ``format_time``: that is sbatch's spelling (``00:02:00``,
    ``UNLIMITED``), for options; this is for people (``1 min -> 2 min``),
    and the stored reasons, tests and users' scripts read it in this form.
    """
    if seconds is None:
        return "unlimited"
    s = int(round(seconds))
    if s < 3600 and s % 60 == 0:
        return f"{s // 60} min"
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:d}:{m:02d}:{sec:02d}"


def fmt_mem(mb: float | None) -> str:
    """MiB as harpd's reasons and ``harp status`` say them: ``200M``, ``64G``; ``unknown`` for None.

    Not ``format_mem``, which turns every multiple of 1024 into G (and
    T): reasons say ``1024M``/``2048M`` and only whole G from 10G up, the
    form the stored reasons and users' scripts read.
    """
    if mb is None:
        return "unknown"
    mb = int(math.ceil(mb))
    if mb >= 10240 and mb % 1024 == 0:
        return f"{mb // 1024}G"
    return f"{mb}M"


def parse_int(s: str, positive: bool = True) -> int:
    """Slurm's ``parse_int`` (used for -c, -n ...): whole string, > 0 when positive."""
    v, end, _ = _strtol(s)
    if s[end:] != "" or v < 0 or (positive and v <= 0):
        raise ValueError(f"invalid number {s!r}")
    return _int32(v)


def _str_to_nodes(s: str) -> tuple[int, str]:
    num, end, _ = _strtol(s)
    if end == 0:
        return 0, s
    rest = s[end:]
    if rest[:1] in ("k", "K"):
        num *= 1024
        rest = rest[1:]
    if rest[:1] in ("m", "M"):
        num *= 1024 * 1024
        rest = rest[1:]
    return _int32(num), rest


def parse_nodes(s: str) -> tuple[int, int]:
    """``-N`` as sbatch reads it: (min, max), max 0 when no maximum was given.

    Mirrors ``verify_node_count``: ``count`` or ``min-max``; a minimum of 0 in
    a range becomes 1.  Raises ValueError for what sbatch rejects.
    """
    if "-" in s:
        lo_s, hi_s = s.split("-", 1)
        lo, left = _str_to_nodes(lo_s)
        if left.strip(_SPACE):
            raise ValueError(f"invalid node count {s!r}")
        if lo == 0:
            lo = 1
        hi, left = _str_to_nodes(hi_s)
        if left.strip(_SPACE):
            raise ValueError(f"invalid node count {s!r}")
    else:
        lo, left = _str_to_nodes(s)
        hi = lo
        if left.strip(_SPACE) or lo < 0:
            raise ValueError(f"invalid node count {s!r}")
    if hi != 0 and hi < lo:
        raise ValueError(f"invalid node count {s!r}")
    return lo, hi


# ---------------------------------------------------------------------------
# accounting forms: what sacct and scontrol print

#: Words sacct and scontrol print where a value is unknown or not set.
_ACCT_UNKNOWN = frozenset({"", "Unknown", "None", "N/A", "(null)", "INVALID"})
_SIZE_MB = {"K": 1.0 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3, "E": 1024.0**4}
_PER = "nc"


def parse_duration_s(text: str | None) -> float | None:
    """Seconds of a duration as accounting prints it, None when there is none.

    ``[D-]HH:MM:SS[.mmm]``, ``MM:SS[.mmm]`` or bare seconds (``Elapsed``,
    ``TotalCPU``, ``Timelimit``, scontrol's ``TimeLimit``/``MaxTime``).  Words
    (``UNLIMITED``, ``Partition_Limit``, ``Unknown``...) and anything
    unreadable give None: a limit harp cannot read is no limit to it.
    """
    if not text or text in _ACCT_UNKNOWN or text[0].isalpha():
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        try:
            days = int(d)
        except ValueError:
            return None
    parts = text.split(":")
    try:
        if len(parts) == 3:
            secs = int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])
        elif len(parts) == 2:
            secs = int(parts[0]) * 60 + float(parts[1])
        elif len(parts) == 1:
            secs = float(parts[0])
        else:
            return None
    except ValueError:
        return None
    return days * 86400 + secs


def parse_size_mb_per(text: str | None, bare_unit: str = "M") -> tuple[float | None, str | None]:
    """``"4Gc"`` -> ``(4096.0, "c")``: MiB and the per-node/per-CPU suffix, if any.

    Slurm before 21.08 printed ``ReqMem`` with ``n`` (per node) or ``c`` (per
    CPU) after the unit; the second item is that letter or None.  Units K, M,
    G, T, P, E (powers of 1024), fractions allowed; a bare number is in
    ``bare_unit`` (``""``: bytes, as in a bare MaxRSS).  Unknown or unreadable
    text gives ``(None, None)``.
    """
    if not text or text in _ACCT_UNKNOWN:
        return None, None
    end = len(text)
    per = None
    if text[-1] in _PER:
        per = text[-1]
        end -= 1
    unit = ""
    if end and text[end - 1] in _SIZE_MB:
        unit = text[end - 1]
        end -= 1
    num = text[:end]
    whole, dot, frac = num.partition(".")
    if not _ascii_digits(whole) or (dot and frac and not _ascii_digits(frac)):
        return None, None
    u = unit or bare_unit
    factor = _SIZE_MB[u] if u else 1.0 / (1024 * 1024)
    return float(num) * factor, per


def parse_size_mb(text: str | None, bare_unit: str = "M") -> float | None:
    """MiB of a size as accounting prints it (``1.50G``, ``45824K``, ``300M``), or None.

    The grammar of ``parse_size_mb_per``, whose per-node/per-CPU suffix only
    ``ReqMem`` of old releases carries; here it is read and dropped.
    """
    return parse_size_mb_per(text, bare_unit)[0]
