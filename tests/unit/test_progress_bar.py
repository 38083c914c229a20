"""The progress bar of long commands (harpd.progress): drawn on a terminal only, closed with a newline."""

from __future__ import annotations

import io

from harpd.progress import Bar


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_draws_on_a_terminal_and_ends_with_a_newline():
    out = Tty()
    bar = Bar(f"{'users':<13}", stream=out)  # as `harp replay --schedule` draws one per policy
    bar(5, 10)
    assert out.getvalue().startswith("\rusers") and " 50%|" in out.getvalue() and "\n" not in out.getvalue()
    bar(10, 10)
    assert " 100%|" in out.getvalue() and out.getvalue().endswith("\n")


def test_bar_is_silent_off_a_terminal_or_when_disabled():
    for out, enabled in ((io.StringIO(), None), (Tty(), False)):
        Bar("x", stream=out, enabled=enabled)(1, 2)
        assert out.getvalue() == ""
