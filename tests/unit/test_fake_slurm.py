"""The tests' fake Slurm backends keep up with the ``SlurmBackend`` Protocol harpd is written against.

A fake that lacks a method, or takes its arguments under other names, lets a
unit test pass against code that would fail on a real cluster; so every
method of the Protocol must exist on each fake and accept every call the
Protocol allows.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from harpd.slurm.base import SlurmBackend
from tests.helpers.fake_slurm import FakeSlurm

HERE = Path(__file__).resolve().parent


def _fake_from(path: Path, name: str) -> type:
    spec = importlib.util.spec_from_file_location(f"checked_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _file_backed_fake() -> type:
    """The recovery tests' fake that lives in a JSON file (it must outlive a SIGKILLed harpd)."""
    return _fake_from(HERE / "recovery" / "resubmit_fakes.py", "FakeSlurm")


def protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(SlurmBackend, name))
        for name in dir(SlurmBackend)
        if not name.startswith("_") and callable(getattr(SlurmBackend, name))
    }


def mismatches(fake: type) -> list[str]:
    """Each way ``fake`` departs from the Protocol, in words; [] when it has every method, callable as it says."""
    problems = []
    for name, wanted in protocol_methods().items():
        got = getattr(fake, name, None)
        if not callable(got):
            problems.append(f"{fake.__name__}.{name} is missing")
            continue
        have = inspect.signature(got)
        takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in have.parameters.values())
        for p in wanted.parameters.values():
            if p.name == "self":
                continue
            mine = have.parameters.get(p.name)
            if p.kind is p.VAR_KEYWORD:
                if not takes_any_keyword:
                    problems.append(f"{fake.__name__}.{name} takes no **{p.name}")
            elif mine is None:
                problems.append(f"{fake.__name__}.{name} has no parameter {p.name!r}")
            elif mine.kind is not p.kind and p.kind is not p.POSITIONAL_OR_KEYWORD:
                problems.append(
                    f"{fake.__name__}.{name}: {p.name!r} is {mine.kind.description}, not {p.kind.description}"
                )
            elif p.default is not p.empty and mine.default is p.empty:
                problems.append(f"{fake.__name__}.{name}: {p.name!r} must be optional")
        extra = [
            q.name
            for q in have.parameters.values()
            if q.name != "self"
            and q.default is q.empty
            and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
            and q.name not in wanted.parameters
        ]
        if extra:
            problems.append(f"{fake.__name__}.{name} requires {extra}, which the Protocol does not pass")
    return problems


@pytest.mark.parametrize("fake", [FakeSlurm, _file_backed_fake()], ids=["in-memory", "file-backed"])
def test_each_fake_backend_has_every_protocol_method_with_its_signature(fake: type) -> None:
    assert mismatches(fake) == []


def test_the_watchers_fake_is_the_one_fake_with_its_defaults() -> None:
    """The watcher tests' queue is FakeSlurm itself (only its ``add`` has the watcher's defaults), so it has
    every method as the Protocol names it and behaves as the other tests' fake does."""
    fake = _fake_from(HERE / "watch" / "watch_fakes.py", "FakeQueue")
    assert issubclass(fake, FakeSlurm)
    assert mismatches(fake) == []
    overridden = {name for name in protocol_methods() if getattr(fake, name) is not getattr(FakeSlurm, name)}
    assert overridden == set()


def test_the_in_memory_fake_is_a_slurm_backend() -> None:
    assert isinstance(FakeSlurm(), SlurmBackend)


def test_the_check_catches_a_fake_that_falls_behind() -> None:
    """The check itself can fail: a fake missing a method, or naming an argument otherwise, is named."""

    class Behind(FakeSlurm):
        signal = None  # type: ignore[assignment]

        def sacct_jobs(self, ids, since, until, all_users):  # type: ignore[override]
            return []

        def update_job(self, job_id, comment=None):  # type: ignore[override]
            return None

    assert mismatches(Behind) == [
        "Behind.sacct_jobs has no parameter 'job_ids'",
        "Behind.sacct_jobs requires ['ids'], which the Protocol does not pass",
        "Behind.signal is missing",
        "Behind.update_job takes no **changes",
    ]
