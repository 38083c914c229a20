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


# ``wire`` is the checker's view of the protocol (TypedDicts, so ``typing``): imported under
# TYPE_CHECKING only, which every other module's test here holds (it would load ``typing``)
CLIENT_MODULES = sorted(p.stem for p in (REPO / "harp_submit").glob("*.py") if p.stem not in ("__init__", "wire"))


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


def test_asking_harpd_over_tcp_imports_nothing_slow() -> None:
    """Resolving harpd's host: getaddrinfo given a str loads the ``idna`` codec, and with it ``re``
    (milliseconds on every submission over TCP), so harp hands it the name's ASCII bytes."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from harp_submit import client\n"
        "class Munge:\n"
        "    def encode(self, payload, ttl=0): return b'MUNGE:stand-in'\n"
        "before = set(sys.modules)\n"
        "for host in ('localhost', '127.0.0.1', 'a..b'):\n"
        "    try: client.call_tcp((host, 1), {'op': 'health'}, 2.0, Munge())\n"
        "    except client.HarpdUnavailable as exc: print(exc.reason)\n"
        "print('NEW', ' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == 4, out.stdout + out.stderr  # each host: one line, never an exception
    assert "cannot resolve harpd's host a..b" in lines[2]
    loaded = {m.split(".")[0] for m in lines[3].split()[1:]} | set(lines[3].split()[1:])
    assert not (loaded & (SLOW | {"encodings.idna", "stringprep", "unicodedata"})), loaded
