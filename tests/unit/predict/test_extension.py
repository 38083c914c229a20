"""The soft policy's extension rule (``harpd.predict.extension``): what harpd's extender and the replay both do."""

from __future__ import annotations

import math

import pytest

from harpd.predict.extension import next_extension


def test_one_extension_goes_straight_to_the_request() -> None:
    ext = next_extension(600, 7200, None, 0, 1)
    assert ext is not None and ext.limit_s == 7200
    assert next_extension(ext.limit_s, 7200, None, 1, 1) is None  # the last: none follows it
    assert "back to the requested 2:00:00" in ext.how and "once" in ext.how


def test_the_partition_cap_bounds_it_in_whole_minutes() -> None:
    ext = next_extension(600, 7200, 3001, 0, 1)  # an odd cap still gives a limit Slurm keeps: whole minutes, up
    assert ext is not None and ext.limit_s == 3060 and ext.limit_s % 60 == 0


def test_earlier_extensions_double_and_the_last_goes_to_the_request() -> None:
    first = next_extension(600, 7200, None, 0, 3)
    assert first is not None and first.limit_s == 1200
    assert next_extension(first.limit_s, 7200, None, 1, 3) is not None  # not the last: another follows
    assert "doubled" in first.how
    last = next_extension(1200, 7200, None, 2, 3)
    assert last is not None and last.limit_s == 7200 and "extension 3 of at most 3" in last.how


@pytest.mark.parametrize("current", [7200, 9000, 0, -5, math.nan, math.inf])
def test_nothing_to_raise_at_or_above_the_request_or_for_a_limit_that_is_not_one(current: float) -> None:
    assert next_extension(current, 7200, None, 0, 2) is None


def test_a_cap_already_reached_ends_the_chain() -> None:
    assert next_extension(3000, 7200, 3000, 0, 5) is None
    assert next_extension(3000, 7200, 3000, 4, 5) is None  # the last one: to the cap, which it has


@pytest.mark.parametrize("max_ext", [1, 2, 3, 64])
@pytest.mark.parametrize("start", [60, 61, 119, 600, 3599])
def test_any_chain_rises_in_whole_minutes_never_past_the_request_and_ends(start: int, max_ext: int) -> None:
    request, cap = 36000.0, 20000.0
    limit, made, seen = float(start), 0, [float(start)]
    while (ext := next_extension(limit, request, cap, made, max_ext)) is not None:
        assert ext.limit_s > limit and ext.limit_s % 60 == 0 and ext.limit_s <= request
        limit, made = float(ext.limit_s), made + 1
        seen.append(limit)
        assert made <= max_ext
    assert limit == 20040.0  # the cap, rounded up to a whole minute, ends it
