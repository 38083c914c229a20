"""Every test file has a basename of its own.

The test folders are not packages (pytest's default "prepend" import mode), so
two files named alike in different folders make collection stop with "import
file mismatch" — on a clean checkout only, where no earlier run's cache hides
it. CI failed exactly that way once; this catches it in the unit run.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_test_file_basenames_are_unique() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in (REPO / "tests").rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(REPO)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
