from datetime import UTC, datetime

import pytest

from harpd.report.window import Window, parse_when, parse_window

NOW = 1_780_000_000.0


@pytest.mark.parametrize(
    "text, back_s",
    [
        ("7d", 7 * 86400),
        ("12h", 12 * 3600),
        ("30m", 1800),
        ("2w", 14 * 86400),
        ("90s", 90),
        ("1.5d", 1.5 * 86400),
        (" 3D ", 3 * 86400),
    ],
)
def test_relative_spans_count_back_from_now(text, back_s):
    assert parse_when(text, NOW) == pytest.approx(NOW - back_s)


def test_iso_date_is_local_midnight_and_offsets_are_honoured():
    assert parse_when("2024-05-01", NOW) == datetime(2024, 5, 1).timestamp()
    assert parse_when("2024-05-01T08:30", NOW) == datetime(2024, 5, 1, 8, 30).timestamp()
    utc = datetime(2024, 5, 1, 8, 30, tzinfo=UTC).timestamp()
    assert parse_when("2024-05-01T08:30:00Z", NOW) == utc
    assert parse_when("2024-05-01T10:30:00+02:00", NOW) == utc


def test_open_ends_and_now():
    assert parse_when("all", NOW) is None
    assert parse_when("now", NOW) == NOW


@pytest.mark.parametrize("bad", ["yesterday-ish", "7x", "2024-13-01", "--3d", ""])  # -3d: 3 days back
def test_bad_values_raise_one_line_naming_the_option(bad):
    with pytest.raises(ValueError) as e:
        parse_when(bad, NOW, option="--until")
    msg = str(e.value)
    assert msg.startswith("--until") and "\n" not in msg


def test_default_window_is_the_configured_days():
    w = parse_window(None, None, 30, NOW)
    assert w == Window(NOW - 30 * 86400, None)


def test_since_after_until_is_refused():
    with pytest.raises(ValueError, match="not before --until"):
        parse_window("1d", "2d", 30, NOW)


def test_describe_reads_naturally():
    assert Window(None, None).describe() == "at any time"
    assert Window(NOW, None).describe().startswith("since ")
    assert Window(None, NOW).describe().startswith("before ")
    assert Window(NOW - 86400, NOW).describe().startswith("between ")
