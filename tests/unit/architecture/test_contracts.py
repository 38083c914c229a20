"""The architecture rules in pyproject.toml ([tool.importlinter]) hold, and they have teeth.

The rules are import-linter contracts so that they sit beside the code; these
tests make the ordinary test run (and so CI) fail when a change breaks one,
and prove on a scratch copy that an upward import or a stray ``subprocess``
would be caught rather than silently allowed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT.exists():
        pytest.fail(f"{LINT} missing: run `bash scripts/setup` (import-linter is a test dependency)")
    return subprocess.run(
        [str(LINT), "--no-logo", "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=str(root),
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )


def test_every_contract_is_kept() -> None:
    proc = _lint(REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout
    assert "Contracts: 7 kept, 0 broken." in proc.stdout


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    """A copy of the two packages and pyproject.toml that a test may break."""
    for pkg in ("harpd", "harp_submit"):
        shutil.copytree(REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + "\n" + line + "\n")


@pytest.mark.parametrize(
    ("module", "line", "contract", "says"),
    [
        (
            "harpd/records.py",
            "import harpd.daemon.handlers  # noqa",
            "harpd is layered",
            "harpd.records is not allowed to import harpd.daemon",
        ),
        (
            "harpd/models/base.py",
            "from harpd.predict import replay  # noqa",
            "harpd is layered",
            "harpd.models is not allowed to import harpd.predict",
        ),
        (
            "harp_submit/units.py",
            "import harpd.records  # noqa",
            "never imports harpd",
            "harp_submit.units -> harpd.records",
        ),
        (
            "harpd/recovery/policy.py",
            "import subprocess  # noqa",
            "only harpd.slurm runs commands",
            "harpd.recovery.policy -> subprocess",
        ),
        (
            "harpd/report/build.py",
            "import sqlite3  # noqa",
            "only harpd.store opens SQLite",
            "harpd.report.build -> sqlite3",
        ),
        ("harpd/predict/allocation.py", "from harpd.predict import live  # noqa", "no import cycles", ".allocation"),
        # the replay calls harpd's decisions; a decision reaching into the replay would make it a twin again
        (
            "harpd/predict/live.py",
            "import harpd.replay.engine  # noqa",
            "never import the replay",
            "harpd.predict.live -> harpd.replay.engine",
        ),
        # one decision path: what only harp replay runs never reaches harpd, directly or through
        # a module the daemon imports (report/build.py once pulled in the EASY simulator)
        (
            "harpd/daemon/handlers.py",
            "import harpd.simulate.easy  # noqa",
            "live path never imports",
            "harpd.simulate.easy",
        ),
        (
            "harpd/report/build.py",
            "import harpd.simulate.easy  # noqa",
            "live path never imports",
            "harpd.report.build -> harpd.simulate.easy",
        ),
        (
            "harpd/recovery/policy.py",
            "import harpd.evaluate.sizey_metric  # noqa",
            "live path never imports",
            "harpd.recovery.policy -> harpd.evaluate.sizey_metric",
        ),
    ],
)
def test_a_broken_rule_is_caught(scratch: Path, module: str, line: str, contract: str, says: str) -> None:
    _append(scratch / module, line)
    proc = _lint(scratch)
    assert proc.returncode != 0
    broken = [ln for ln in proc.stdout.splitlines() if " BROKEN" in ln]  # "BROKEN (2 ignored imports)" too
    assert any(contract in ln for ln in broken), proc.stdout[-3000:]
    assert says in proc.stdout, proc.stdout[-3000:]
