"""Slurm time and memory formats: every format sbatch accepts, and agreement with Slurm's C code."""

from __future__ import annotations

import ctypes
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harp_submit import units

LIBSLURM = "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so"


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("10", 600),  # minutes
        ("0:30", 60),  # minutes:seconds, rounded up to whole minutes as sbatch does
        ("1:30", 120),
        ("90:00", 5400),
        ("1:02:03", 3780),  # hours:minutes:seconds -> 63 min (rounded up)
        ("2-0", 2 * 86400),  # days-hours
        ("2-12", 2 * 86400 + 12 * 3600),
        ("1-2:30", 86400 + 2 * 3600 + 30 * 60),  # days-hours:minutes
        ("1-02:30:00", 86400 + 2 * 3600 + 30 * 60),  # days-hours:minutes:seconds
        ("3-", 3 * 86400),
        ("00:00:01", 60),
        ("0:61", 120),
    ],
)
def test_parse_time_accepts_every_sbatch_format(text: str, seconds: int) -> None:
    assert units.parse_time(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "unlimited", "INFINITE", "Infinite", "-1", "0"])
def test_unlimited_spellings_mean_no_limit(text: str) -> None:
    assert units.parse_time(text) is None


@pytest.mark.parametrize("text", ["", "1:2:3:4", "1-2-3", "a", " 5", "5 ", "1::2", "1:", "-", "1h", "1.5", "1-:2"])
def test_parse_time_rejects_what_sbatch_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        units.parse_time(text)


def test_negative_time_is_not_understood() -> None:
    # sbatch accepts "-5" (and shows the limit as INVALID); harp leaves it alone
    assert units.time_str2mins("-5") == -7199
    with pytest.raises(ValueError):
        units.parse_time("-5")


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "00:00:00"),
        (59, "00:00:59"),
        (3600, "01:00:00"),
        (5400, "01:30:00"),
        (86400, "1-00:00:00"),
        (90061, "1-01:01:01"),
        (None, "UNLIMITED"),
    ],
)
def test_format_time_is_slurms_rendering(seconds: int | None, text: str) -> None:
    assert units.format_time(seconds) == text


@given(st.integers(min_value=1, max_value=10 * 365 * 86400))
def test_format_then_parse_time_round_trips_to_the_minute(seconds: int) -> None:
    assert units.parse_time(units.format_time(seconds)) == -(-seconds // 60) * 60


@pytest.mark.parametrize(
    "text, mb",
    [
        ("100", 100),
        ("100M", 100),
        ("100m", 100),
        ("100MB", 100),
        ("4G", 4096),
        ("4g", 4096),
        ("4GB", 4096),
        ("1T", 1048576),
        ("1t", 1048576),
        ("1024K", 1),
        ("1500k", 2),
        ("1K", 1),
        ("0", 0),
        ("+5", 5),
        (" 5G", 5120),
        ("010", 10),
    ],
)
def test_parse_mem_units(text: str, mb: int) -> None:
    assert units.parse_mem(text) == mb


@pytest.mark.parametrize("text", ["", "-5", "5Gfoo", "5 ", "5x", "1.5G", "0x10", "1e3", "G", "99999999999999999999"])
def test_parse_mem_rejects_what_sbatch_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        units.parse_mem(text)


@pytest.mark.parametrize(
    "mb, text",
    [(0, "0M"), (100, "100M"), (1024, "1G"), (1536, "1536M"), (4096, "4G"), (1048576, "1T"), (1049600, "1025G")],
)
def test_format_mem(mb: int, text: str) -> None:
    assert units.format_mem(mb) == text


@given(st.integers(min_value=0, max_value=1 << 40))
def test_format_then_parse_mem_round_trips(mb: int) -> None:
    assert units.parse_mem(units.format_mem(mb)) == mb


@pytest.mark.parametrize("text, value", [("4", 4), (" 2", 2), ("+3", 3), ("010", 10)])
def test_parse_int(text: str, value: int) -> None:
    assert units.parse_int(text) == value


@pytest.mark.parametrize("text", ["0", "-2", "2x", "", " ", "2 "])
def test_parse_int_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        units.parse_int(text)


@pytest.mark.parametrize(
    "text, pair", [("2", (2, 2)), ("1-4", (1, 4)), ("0-2", (1, 2)), ("0", (0, 0)), ("2-", (2, 0)), ("1k", (1024, 1024))]
)
def test_parse_nodes(text: str, pair: tuple[int, int]) -> None:
    assert units.parse_nodes(text) == pair


@pytest.mark.parametrize("text", ["1x", "4-2", "-1x", "a"])
def test_parse_nodes_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        units.parse_nodes(text)


# --- agreement with the installed Slurm (the functions sbatch itself calls) ---------

needs_libslurm = pytest.mark.skipif(not os.path.exists(LIBSLURM), reason="libslurmfull not installed")


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(LIBSLURM)
    lib.str_to_mbytes.restype = ctypes.c_uint64
    lib.str_to_mbytes.argtypes = [ctypes.c_char_p]
    lib.time_str2secs.restype = ctypes.c_int
    lib.time_str2secs.argtypes = [ctypes.c_char_p]
    lib.time_str2mins.restype = ctypes.c_int
    lib.time_str2mins.argtypes = [ctypes.c_char_p]
    return lib


# strings made of the characters that matter to these parsers, plus big numbers
# (but not within 2**10 of LLONG_MAX with a unit: there Slurm's C arithmetic
# overflows, which is undefined behaviour and compiles to whatever it compiles to)
slurmish = st.one_of(
    st.text(alphabet="0123456789-:+ kKmMgGtTbBxe.", max_size=10),
    st.builds(
        lambda n, u: f"{n}{u}",
        st.one_of(st.integers(min_value=0, max_value=10**15), st.integers(min_value=10**19, max_value=10**22)),
        st.sampled_from(["", "K", "M", "G", "T", "TB", ":5", "-1"]),
    ),
    st.sampled_from(["UNLIMITED", "infinite", "-1", "2147483647", "99999999999"]),
)


@needs_libslurm
@settings(max_examples=3000)
@given(slurmish)
def test_time_parsing_matches_libslurm(lib, text: str) -> None:
    raw = text.encode()
    assert units.time_str2secs(text) == lib.time_str2secs(raw)
    assert units.time_str2mins(text) == lib.time_str2mins(raw)


@needs_libslurm
@settings(max_examples=3000)
@given(slurmish)
def test_memory_parsing_matches_libslurm(lib, text: str) -> None:
    assert units.str_to_mbytes(text) == lib.str_to_mbytes(text.encode())


# ------------------------------------------------------- accounting forms


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("1-02:03:04", 93784.0),  # days-hours:minutes:seconds
        ("19:35:20", 70520.0),
        ("00:01.234", 1.234),  # TotalCPU: minutes:seconds.milliseconds
        ("05:30", 330.0),
        ("42", 42.0),  # a bare number is seconds here, not minutes as for sbatch
        ("2-00:00:00", 172800.0),
    ],
)
def test_parse_duration_s_reads_what_sacct_prints(text: str, seconds: float) -> None:
    assert units.parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [None, "", "UNLIMITED", "Partition_Limit", "INVALID", "Unknown", "(null)", "1:2:3:4", "x-1:00", "-5", "1-", "1:xx"],
)
def test_parse_duration_s_none_for_no_limit_or_unreadable(text: str | None) -> None:
    assert units.parse_duration_s(text) is None


@pytest.mark.parametrize(
    "text, bare, mb",
    [
        ("1.50G", "M", 1536.0),
        ("123K", "M", 123 / 1024),
        ("300M", "M", 300.0),
        ("2T", "M", 2 * 1024 * 1024.0),
        ("1P", "M", 1024.0**3),
        ("512", "M", 512.0),  # ReqMem without unit: MiB
        ("1048576", "", 1.0),  # MaxRSS without unit: bytes
        ("5.", "M", 5.0),
        ("4Gn", "M", 4096.0),  # the old per-node suffix is read and dropped
    ],
)
def test_parse_size_mb_reads_what_sacct_prints(text: str, bare: str, mb: float) -> None:
    assert units.parse_size_mb(text, bare_unit=bare) == pytest.approx(mb)


@pytest.mark.parametrize("text", [None, "", "N/A", "junk", "1.5.0G", ".5G", "5KB", "5 G", "-5M", "5g", "١٢M", "G"])
def test_parse_size_mb_none_for_unknown_or_unreadable(text: str | None) -> None:
    assert units.parse_size_mb(text) is None
    assert units.parse_size_mb_per(text) == (None, None)


def test_parse_size_mb_per_keeps_the_old_per_node_or_per_cpu_suffix() -> None:
    assert units.parse_size_mb_per("4Gc") == (4096.0, "c")
    assert units.parse_size_mb_per("100Mn") == (100.0, "n")
    assert units.parse_size_mb_per("100c") == (100.0, "c")
    assert units.parse_size_mb_per("100M") == (100.0, None)


def test_accounting_and_sbatch_grammars_differ_where_slurm_does() -> None:
    # sbatch: a bare time is minutes and sizes are whole; sacct: seconds, fractions allowed
    assert units.parse_time("5") == 300 and units.parse_duration_s("5") == 5.0
    with pytest.raises(ValueError):
        units.parse_mem("1.50G")
    assert units.parse_size_mb("1.50G") == 1536.0
