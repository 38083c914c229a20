"""How many untyped dicts cross harp's module boundaries: ``dict[str, Any]`` and bare ``dict`` in public signatures.

A public function or method (its name does not start with ``_``) is what
another module calls; a parameter or return annotated ``dict[str, Any]`` (or
a bare ``dict``, or ``typing.Dict``) there makes every caller read string keys
that no type checker follows.  Each such annotation counts once per place it
appears inside a signature (``list[dict[str, Any]] | None`` counts one).
Private helpers (``_name``) are not counted: their dicts stay inside a module.

Printed per package (``harpd.<package>``, and each top-level module
``harpd.<module>``; ``harp_submit``) and in total, for the working tree and, with
``--baseline REF`` (default ``ae0086a``, the commit before issue 31's typed
records), for that commit's files read through ``git show``::

    python bench/typed_boundaries.py [--baseline REF | --no-baseline]

The figure passes when the working tree has fewer than the baseline.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harpd", "harp_submit")
DEFAULT_BASELINE = "ae0086a"


def _is_str_any(node: ast.expr) -> bool:
    """Whether a subscript's index is ``str, Any`` (``typing.Any`` too)."""
    if not isinstance(node, ast.Tuple) or len(node.elts) != 2:
        return False
    key, value = node.elts
    value_name = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", None)
    return isinstance(key, ast.Name) and key.id == "str" and value_name == "Any"


def _dict_name(node: ast.expr) -> bool:
    """``dict``, ``Dict`` or ``typing.Dict``."""
    if isinstance(node, ast.Name):
        return node.id in ("dict", "Dict")
    return isinstance(node, ast.Attribute) and node.attr == "Dict"


def untyped_dicts(annotation: ast.expr | None) -> int:
    """How many ``dict[str, Any]`` / bare ``dict`` an annotation holds (a string annotation is parsed)."""
    if annotation is None:
        return 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return 0
    count = 0
    subscripted: set[int] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Subscript) and _dict_name(node.value):
            subscripted.add(id(node.value))
            if _is_str_any(node.slice):
                count += 1
    for node in ast.walk(annotation):
        if _dict_name(node) and id(node) not in subscripted:  # type: ignore[arg-type]
            count += 1
    return count


def _public_functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            yield node


def count_source(source: str) -> int:
    """Untyped dicts in the public signatures of one module's source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    total = 0
    for fn in _public_functions(tree):
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
        total += sum(untyped_dicts(p.annotation) for p in params) + untyped_dicts(fn.returns)
    return total


def package_of(path: str) -> str:
    """``harpd/watch/extend.py`` -> ``harpd.watch``; a top-level module is its own (``harpd.store``).

    So the store reads as one row whether it is a module (the baseline) or a package.
    """
    parts = Path(path).parts
    if len(parts) > 2:
        return ".".join(parts[:2])
    stem = Path(parts[-1]).stem
    return parts[0] if len(parts) == 1 or stem == "__init__" else f"{parts[0]}.{stem}"


def _tree_files() -> Iterator[tuple[str, str]]:
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            yield str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def _baseline_files(ref: str) -> Iterator[tuple[str, str]]:
    for path in _git("ls-tree", "-r", "--name-only", ref, "--", *PACKAGES).splitlines():
        if path.endswith(".py"):
            yield path, _git("show", f"{ref}:{path}")


def counts(files: Iterable[tuple[str, str]]) -> Counter[str]:
    """Untyped dicts per package."""
    out: Counter[str] = Counter()
    for path, source in files:
        out[package_of(path)] += count_source(source)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git commit to compare with (default %(default)s)")
    ap.add_argument("--no-baseline", action="store_true", help="count the working tree only")
    args = ap.parse_args(argv)

    head = counts(_tree_files())
    base: Counter[str] | None = None
    if not args.no_baseline:
        try:
            base = counts(_baseline_files(args.baseline))
        except (OSError, subprocess.CalledProcessError) as exc:
            print(
                f"typed_boundaries: baseline {args.baseline} unreadable ({exc}); counting the working tree only",
                file=sys.stderr,
            )
    names = sorted(n for n in set(head) | set(base or {}) if head[n] or (base or {}).get(n))  # none: not shown
    width = max(len(n) for n in names)
    print(f"{'package':<{width}}  {'now':>5}" + (f"  {args.baseline:>9}" if base is not None else ""))
    for name in names:
        line = f"{name:<{width}}  {head[name]:>5}"
        if base is not None:
            line += f"  {base[name]:>9}"
        print(line)
    for pkg in PACKAGES:
        line = f"{pkg + ' (all)':<{width}}  {sum(v for k, v in head.items() if k.split('.')[0] == pkg):>5}"
        if base is not None:
            line += f"  {sum(v for k, v in base.items() if k.split('.')[0] == pkg):>9}"
        print(line)
    total = sum(head.values())
    if base is None:
        print(f"total: {total} untyped dicts in public signatures")
        return 0
    before = sum(base.values())
    verdict = "PASS" if total < before else "FAIL"
    print(f"FIGURE typed_boundaries: {total} annotations (target < {before}) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
