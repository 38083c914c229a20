"""Privilege detection (reusing recovery's rule) and the limits mode it gives."""

from __future__ import annotations

from harpd.config import HarpSettings
from harpd.recovery import mode as mode_mod
from harpd.watch.privilege import detect


class Backend:
    def __init__(self, slurm_user="slurm", level=None):
        self._su, self._level = slurm_user, level

    def slurm_user(self):
        return self._su

    def admin_level(self, user):
        return self._level


def test_operator_gets_soft_limits_plain_user_hard(monkeypatch):
    monkeypatch.setattr(mode_mod.os, "geteuid", lambda: 4242)
    monkeypatch.setattr(mode_mod, "_me", lambda: "harpsvc")
    p = detect(HarpSettings(), Backend(level="Operator"))
    assert p.privileged and p.soft_limits and p.mode == "soft" and "operator" in p.why
    p = detect(HarpSettings(), Backend(level=None))
    assert not p.privileged and not p.soft_limits and p.mode == "hard"
    assert detect(HarpSettings(), Backend(slurm_user="harpsvc")).privileged
    assert p.as_health() == {"mode": "hard", "privileged": False, "why": p.why}


def test_soft_limits_setting_off_keeps_hard_limits(monkeypatch):
    monkeypatch.setattr(mode_mod.os, "geteuid", lambda: 0)
    p = detect(HarpSettings(watch={"soft_limits": False}), Backend())
    assert p.privileged and not p.soft_limits and p.mode == "hard"
    assert not detect(HarpSettings(), None).privileged


def test_recovery_mode_setting_does_not_fake_privilege(monkeypatch):
    monkeypatch.setattr(mode_mod.os, "geteuid", lambda: 4242)
    monkeypatch.setattr(mode_mod, "_me", lambda: "harpsvc")
    assert not detect(HarpSettings(recovery={"mode": "requeue"}), Backend()).privileged
