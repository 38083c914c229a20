"""systemd/harpd.service: hardened, yet able to run the Slurm commands."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[3] / "systemd" / "harpd.service"


def directives() -> dict[str, str]:
    cp = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#",))
    cp.optionxform = str  # keep systemd's capitalisation
    cp.read(UNIT)
    return {k: v for section in cp.sections() for k, v in cp[section].items()}


def test_hardening_directives():
    d = directives()
    assert d["Type"] in ("notify", "simple")
    assert d["ProtectSystem"] == "strict"
    assert set(d["ReadWritePaths"].split()) == {"/var/lib/harp", "/run/harp"}
    assert d["RuntimeDirectory"] == "harp" and d["StateDirectory"] == "harp"
    assert d["PrivateTmp"] == "yes" and d["NoNewPrivileges"] == "yes"
    assert d["ProtectHome"] == "read-only"
    assert d["RestartPreventExitStatus"] == "2"  # config errors do not restart-loop


def test_nothing_that_would_break_slurm_commands():
    d = directives()
    assert "PrivateNetwork" not in d and "IPAddressDeny" not in d  # slurmctld over TCP
    assert "User" not in d  # root: requeue mode needs Slurm operator rights
    families = d["RestrictAddressFamilies"].split()
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= set(families)  # munge socket + slurmctld
    assert "InaccessiblePaths" not in d


def test_every_directive_is_explained_by_a_comment():
    lines = UNIT.read_text().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#") and not line.startswith("["):
            key = line.split("=", 1)[0]
            if key in ("Description", "Documentation", "WantedBy"):
                continue
            above = lines[max(0, i - 8) : i]
            assert any(a.startswith("#") for a in above), f"{key} has no comment nearby"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_accepts_the_unit(tmp_path):
    unit = tmp_path / "harpd.service"
    text = UNIT.read_text().replace("/usr/local/bin/harpd", shutil.which("true") or "/bin/true")
    unit.write_text(text)
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=300)
    problems = [l for l in (out.stdout + out.stderr).splitlines() if "harpd.service" in l]
    assert problems == [], problems
