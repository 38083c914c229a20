"""harpd.daemon.heap: loaded objects leave the collector's scans; a reload lets the old ones go."""

from __future__ import annotations

import gc
import weakref

import pytest

from harpd.daemon.heap import Settling, settle


class Model:
    """A loaded model with a reference cycle, as trees and their parents have."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def _unfreeze():
    yield
    gc.unfreeze()


def test_settle_freezes_what_is_loaded() -> None:
    gc.unfreeze()
    keep = [Model() for _ in range(1000)]
    assert settle() >= 1000
    assert gc.get_freeze_count() >= 1000
    del keep


def test_a_reload_lets_the_replaced_models_be_collected() -> None:
    class Predictor:
        def __init__(self) -> None:
            self.model = Model()
            self.reloads = 0

        def reload(self) -> str:
            self.model = Model()  # the old one is now cyclic garbage
            self.reloads += 1
            return "reloaded"

    pred = Predictor()
    settle()  # the first model frozen, as at start
    old = weakref.ref(pred.model)
    assert Settling(pred).reload() == "reloaded"
    assert pred.reloads == 1
    # frozen garbage would never be collected: the reload unfroze and collected it
    assert old() is None
    assert gc.get_freeze_count() > 0


def test_a_failed_reload_still_settles() -> None:
    class Broken:
        def reload(self) -> None:
            raise RuntimeError("model file unreadable")

    gc.unfreeze()
    with pytest.raises(RuntimeError, match="unreadable"):
        Settling(Broken()).reload()
    assert gc.get_freeze_count() > 0
