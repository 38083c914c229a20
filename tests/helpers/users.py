"""Unix users for the Slurm tests: a second user (``harptest1``) and a Python it can run harp with."""

from __future__ import annotations

import os
import pwd
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        proc = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", name], capture_output=True, text=True
        )
        if proc.returncode != 0:
            pytest.fail(f"cannot create test user {name}: {proc.stderr.strip()}", pytrace=False)
        return pwd.getpwnam(name)


def user_python(user: str) -> tuple[str, str]:
    """(python, PYTHONPATH) with which ``user`` can import harp and its dependencies.

    This interpreter may live where other users cannot go (pyenv under /root);
    then a system Python of the same version gets this one's site-packages.
    """
    paths = [str(REPO), *site.getsitepackages()]
    pythonpath = os.pathsep.join(paths)
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    check = (
        "import sys, harpd.daemon.main, harp_submit.cli, pydantic, apscheduler, sqlite_utils; "
        f"assert '%d.%d' % sys.version_info[:2] == '{want}'"
    )
    tried = []
    for py in dict.fromkeys(
        [sys.executable, f"/usr/bin/python{want}", "/usr/bin/python3", shutil.which("python3") or ""]
    ):
        if not py:
            continue
        proc = subprocess.run(
            ["runuser", "-u", user, "--", "env", f"PYTHONPATH={pythonpath}", py, "-c", check],
            capture_output=True,
            text=True,
            cwd="/",
        )
        if proc.returncode == 0:
            return py, pythonpath
        tried.append(f"{py}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    pytest.fail(f"no Python {want} that {user} can run with harp importable ({'; '.join(tried)})", pytrace=False)
