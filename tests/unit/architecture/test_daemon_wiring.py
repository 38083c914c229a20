"""harpd builds every part with what it needs, and owns the one scheduler they run on.

A part completed after construction (``handlers.recovery = ...``, a listener
appended to a built poller, a service found again by ``isinstance``) can be
used half built, and its dependencies are nowhere to be read in its
constructor.  These checks read ``harpd/daemon/main.py`` (where harpd wires
its parts) and the whole package for the scheduler, and prove on planted code
that each rule would catch a violation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WIRING = REPO / "harpd" / "daemon" / "main.py"
SCHEDULER = REPO / "harpd" / "daemon" / "scheduler.py"

#: attributes main.py may still set after construction, and why
ALLOWED = {
    # the socket is bound before any part exists, so that a second harpd fails before it polls Slurm
    "server.handlers",
}
_MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault"}


def _dotted(node: ast.AST) -> str:
    return ast.unparse(node)


def wiring_violations(source: str) -> list[str]:
    """Each after-the-fact completion of a built object in ``source``, as ``line: what``."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for leaf in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(leaf, ast.Attribute) and _dotted(leaf) not in ALLOWED:
                    out.append(f"{node.lineno}: {_dotted(leaf)} set after construction")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr in _MUTATORS and isinstance(owner, ast.Attribute):
                out.append(f"{node.lineno}: {_dotted(node.func)}(...) completes a built object")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            out.append(f"{node.lineno}: isinstance(...) finds a part instead of being given it")
    return out


def test_the_daemon_builds_every_part_with_what_it_needs() -> None:
    assert wiring_violations(WIRING.read_text()) == []


@pytest.mark.parametrize(
    ("planted", "says"),
    [
        ("handlers.recovery = next(iter(services), None)", "handlers.recovery set after construction"),
        ("handlers.ingestor: Any = ingest.ingestor", "handlers.ingestor set after construction"),
        ("ingest.ingestor.on_outcome.append(watch.on_outcome)", "ingest.ingestor.on_outcome.append(...)"),
        ("live.learners += [learn]", "live.learners set after construction"),
        ("w = next(s for s in services if isinstance(s, Watch))", "isinstance(...)"),
    ],
)
def test_a_planted_completion_is_caught(planted: str, says: str) -> None:
    source = WIRING.read_text().replace(
        "    log.info(\"predictor: %s\", predictor.name)\n",
        f'    log.info("predictor: %s", predictor.name)\n    {planted}\n',
        1,
    )
    assert source != WIRING.read_text(), "the anchor the test plants after is gone from main.py"
    found = wiring_violations(source)
    assert len(found) == 1 and says in found[0], found


def test_local_lists_and_the_allowed_server_handlers_are_not_violations() -> None:
    ok = "services = []\nservices.extend(more)\nserver.handlers = handlers\n"
    assert wiring_violations(ok) == []


def test_only_the_daemon_makes_a_scheduler() -> None:
    """One scheduler, made in harpd.daemon: every other part is given it (``add_job`` on what it gets)."""
    makers = re.compile(r"\bapscheduler\.schedulers\b|\bBackgroundScheduler\b")
    found = [
        str(path.relative_to(REPO))
        for path in (REPO / "harpd").rglob("*.py")
        if path != SCHEDULER and makers.search(path.read_text())
    ]
    assert found == []
    assert makers.search(SCHEDULER.read_text())  # so the search above could find one
    # and no part reaches for another part's scheduler
    reach = re.compile(r"\.scheduler\.add_job\b|ingest_service")
    assert [str(p.relative_to(REPO)) for p in (REPO / "harpd").rglob("*.py") if reach.search(p.read_text())] == []
