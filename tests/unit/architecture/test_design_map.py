"""docs/design.md's module map is the tree: every module is named under its package, and no name is stale.

A reader finds the place for a change from the map; a map that lists a
module the tree lost, or misses one it gained, sends them to the wrong
place.  This test reads the map's code block (a package header at column 0,
its modules named after it, inline or one per line) and checks it against
the files.  It proves on a scratch map that it catches both faults.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DESIGN = ROOT / "docs" / "design.md"
PACKAGES = ("harp_submit", "harpd")
_HEADER = re.compile(r"^((?:harp_submit|harpd)(?:/[a-z_]+)*/)")
_MODULE = re.compile(r"(?<![\w/.])([a-z_][a-z0-9_]*\.py)\b")


def map_sections(text: str) -> dict[str, set[str]]:
    """Package folder (``harpd/watch/``) -> the module file names its section of the map names."""
    block = text.split("### Module map", 1)[1].split("```", 2)[1]
    out: dict[str, set[str]] = {}
    current: str | None = None
    for line in block.splitlines():
        m = _HEADER.match(line)
        if m:
            current = m.group(1)
            out.setdefault(current, set())
            line = line[len(current) :]
        elif line[:1].strip():  # another top-level entry (plugins/, scripts/, tests/...): not a package
            current = None
            continue
        if current is not None:
            out[current].update(_MODULE.findall(line))
    return out


def tree_modules(root: Path) -> dict[str, set[str]]:
    """Package folder -> its module files (``__init__.py`` and caches left out)."""
    out: dict[str, set[str]] = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" in f.parts or f.name == "__init__.py":
                continue
            folder = f.parent.relative_to(root).as_posix() + "/"
            out.setdefault(folder, set()).add(f.name)
    return out


def problems(sections: dict[str, set[str]], tree: dict[str, set[str]]) -> list[str]:
    """What the map gets wrong, one line each."""
    out = []
    for folder, files in sorted(tree.items()):
        if folder not in sections:
            out.append(f"{folder}: a package the map does not name")
            continue
        out += [f"{folder}{name}: missing from the map" for name in sorted(files - sections[folder])]
    for folder, named in sorted(sections.items()):
        out += [f"{folder}{name}: in the map, not in the tree" for name in sorted(named - tree.get(folder, set()))]
    return out


def test_the_design_map_names_every_module_and_no_other():
    found = problems(map_sections(DESIGN.read_text()), tree_modules(ROOT))
    assert not found, "docs/design.md 'Module map' is out of date:\n" + "\n".join(found)


def test_the_check_catches_a_missing_and_a_stale_module(tmp_path: Path):
    (tmp_path / "harpd" / "watch").mkdir(parents=True)
    (tmp_path / "harp_submit").mkdir()
    for name in ("harpd/watch/extend.py", "harpd/watch/resize.py", "harp_submit/cli.py", "harpd/watch/__init__.py"):
        (tmp_path / name).write_text("")
    text = (
        "### Module map\n\n```\nharp_submit/\n  cli.py   the flow\n"
        "harpd/watch/  extend.py, gone.py\nplugins/ x.py\n```\n"
    )
    found = problems(map_sections(text), tree_modules(tmp_path))
    assert found == ["harpd/watch/resize.py: missing from the map", "harpd/watch/gone.py: in the map, not in the tree"]
