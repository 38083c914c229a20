"""harp-submit imports only the standard library, and none of its slow-to-import parts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# each costs milliseconds of start-up on every submission (enum, re, typing ...); ctypes and
# hashlib only where TCP is used (libmunge, the credential's hash): never on the Unix-socket path
SLOW = {
    "re",
    "enum",
    "typing",
    "json",
    "socket",
    "subprocess",
    "dataclasses",
    "tomllib",
    "argparse",
    "signal",
    "selectors",
    "threading",
    "inspect",
    "pathlib",
    "shlex",
    "tempfile",
    "logging",
    "ctypes",
    "hashlib",
    "shutil",
}


def test_cli_imports_only_fast_standard_library_modules() -> None:
    code = (
        "import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]);"
        "import harp_submit.cli; new = sorted(set(sys.modules) - before); print(' '.join(new))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    ours = {m for m in loaded if m.split(".")[0] == "harp_submit"}
    others = {m.split(".")[0] for m in loaded - ours}
    assert others <= set(sys.stdlib_module_names), others - set(sys.stdlib_module_names)
    assert not (others & SLOW), others & SLOW
    assert "harp_submit.cli" in ours and not any(m.startswith("harpd") for m in loaded)


CLIENT_MODULES = sorted(p.stem for p in (REPO / "harp_submit").glob("*.py") if p.stem != "__init__")


def test_the_client_module_list_is_complete() -> None:
    assert {"cli", "filter", "sbatch_run", "registration", "step_aside", "decision"} <= set(CLIENT_MODULES)


@pytest.mark.parametrize("module", CLIENT_MODULES)
def test_each_client_module_imports_only_fast_standard_library_modules(module: str) -> None:
    """Every module of the package, so a module split off the entry points stays as light as they are."""
    code = (
        "import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]);"
        f"import harp_submit.{module}; new = sorted(set(sys.modules) - before); print(' '.join(new))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    others = {m.split(".")[0] for m in loaded if m.split(".")[0] != "harp_submit"}
    assert others <= set(sys.stdlib_module_names), others - set(sys.stdlib_module_names)
    assert not (others & SLOW), others & SLOW
