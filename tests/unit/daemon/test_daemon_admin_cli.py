"""`harp retrain` and `harp reload` against a real harpd: what it answered, as one line when it did not."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import as_nobody

from harpd.cli.main import main as harp
from harpd.records import JobRecord, Outcome
from harpd.store import Store
from tests.helpers.harpd_process import running_harpd


@pytest.fixture(scope="module")
def harpd() -> Iterator[Path]:
    """A harpd (no Slurm reachable) whose store holds 16 finished jobs: far too few to train on."""
    d = Path(tempfile.mkdtemp(prefix="hadm-", dir="/tmp"))  # short, and reachable by `nobody`
    os.chmod(d, 0o755)
    (d / "lib").mkdir()
    with Store.open(d / "lib" / "harp.db") as store:
        store.insert_jobs(
            [
                JobRecord(
                    job_id=str(100 + i),
                    user="alice",
                    partition="cpu",
                    signature="sim.sh",
                    submit_time=1.7e9 + 600 * i,
                    start_time=1.7e9 + 600 * i + 10,
                    end_time=1.7e9 + 600 * i + 310,
                    outcome=Outcome.COMPLETED,
                    req_time_s=3600.0,
                    req_mem_mb=4096.0,
                    req_cpus=1,
                    alloc_cpus=1,
                    used_time_s=300.0,
                    used_mem_mb=512.0,
                )
                for i in range(16)
            ]
        )
    with running_harpd(d, extra_toml=f'[slurm]\nbin_dir = "{d}/no-slurm-here"\n'):
        yield d
    shutil.rmtree(d, ignore_errors=True)


def run(capsys, config: Path, *args: str) -> tuple[int, str, str]:
    rc = harp(["--config", str(config), *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_reload_says_what_harpd_loaded(harpd, capsys):
    rc, out, err = run(capsys, harpd / "harpd.toml", "reload")
    assert rc == 0 and err == ""
    assert out.startswith("harpd reloaded: no model loaded") and "harp retrain" in out
    rc, out, _ = run(capsys, harpd / "harpd.toml", "reload", "--format", "json")
    assert rc == 0 and json.loads(out) == {"ok": True, "message": "reloaded", "result": {}}


def test_retrain_with_too_little_history_is_harpds_reason_on_one_line(harpd, capsys):
    rc, out, err = run(capsys, harpd / "harpd.toml", "retrain")
    assert rc == 1 and out == ""
    assert err.startswith("harp: harpd trained no model (") and err.count("\n") == 1
    assert "time: only 16 usable jobs; need 1000" in err and "mem: only 16 usable jobs; need 1000" in err
    rc, out, err = run(capsys, harpd / "harpd.toml", "retrain", "--format", "json")
    answer = json.loads(out)
    assert rc == 1 and answer["ok"] is True and answer["result"]["time"]["skipped"] == "only 16 usable jobs; need 1000"
    assert err.startswith("harp: harpd trained no model")


def test_retrain_shows_the_models_their_scores_and_the_champions(serve, short_dir, store, capsys):
    from harpd.daemon.handlers import AdminActions, Handlers

    def model(name, score, champion):
        return {
            "name": name,
            "path": f"/m/{name}.pkl",
            "champion": champion,
            "score": {"score": score, "under_rate": 0.041, "reserved_over_used": 1.83},
        }

    result = {
        "time": {
            "resource": "time",
            "n_jobs": 12345,
            "champion": "gbm",
            "seconds": 34.21,
            "skipped": None,
            "models": [model("request", 1.234, False), model("gbm", 0.412, True)],
        },
        "mem": {
            "resource": "mem",
            "n_jobs": 16,
            "champion": None,
            "models": [],
            "seconds": 0.0,
            "skipped": "only 16 usable jobs; need 1000",
        },
        "loaded": {"time": {"name": "gbm", "path": "/m/gbm.pkl"}},
    }
    srv = serve(handlers=Handlers(store, actions=AdminActions(retrain=lambda: result)))
    cfg = short_dir / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{srv.path}"\n[store]\npath = "{short_dir}/harp.db"\n')
    rc, out, err = run(capsys, cfg, "retrain")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "time: trained on 12,345 jobs in 34.2 s; champion gbm"
    assert lines[2].split() == ["request", "1.234", "4.1%", "1.83"]
    assert lines[3].split() == ["*", "gbm", "0.412", "4.1%", "1.83"]
    assert lines[4:] == ["mem: not trained: only 16 usable jobs; need 1000", "harpd now predicts with: time gbm"]


@pytest.mark.parametrize("op", ["retrain", "reload"])
def test_without_harpd_one_line(tmp_path, capsys, op):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{tmp_path}/none.sock"\n[store]\npath = "{tmp_path}/harp.db"\n')
    rc, out, err = run(capsys, cfg, op)
    assert rc == 1 and out == ""
    assert err.startswith("harp: harpd is not running") and f"run harp {op} again" in err and err.count("\n") == 1


def test_bad_timeout_is_a_usage_error(harpd, capsys):
    rc, _, err = run(capsys, harpd / "harpd.toml", "retrain", "--timeout", "0")
    assert rc == 2 and err == "harp: --timeout 0: must be a positive number of seconds\n"


def _harp_as_nobody(sock: str, args: list[str]) -> list:
    """``harp ARGS`` run as ``nobody`` (forked): its exit code and what it wrote to stderr."""

    def child() -> list:
        os.environ["HARP_SOCKET"] = sock
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = harp(args)
        return [rc, err.getvalue()]

    return as_nobody(child)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: drops to nobody")
@pytest.mark.parametrize("op", ["retrain", "reload"])
def test_a_non_admin_gets_harpds_refusal_as_one_line(harpd, op):
    assert _harp_as_nobody(str(harpd / "harpd.sock"), [op]) == [
        1,
        f"harp: {op} is an admin operation: run it as root\n",
    ]


def test_health_says_what_recovery_can_do_on_this_cluster(serve, short_dir, store, capsys):
    from harpd import protocol as p
    from harpd.daemon.handlers import Handlers, HealthSources
    from harpd.recovery.site_accounting import read_site_accounting
    from harpd.slurm.base import Accounting

    class Slurm:  # what `scontrol show config` said: a site without job_env
        def accounting(self):
            return Accounting(script=True, env=False, flags="job_comment,job_script")

    acc = read_site_accounting(Slurm()).as_health()
    srv = serve(
        handlers=Handlers(
            store,
            health=HealthSources(
                limits_mode=p.LimitsHealth(mode="hard", privileged=False, why="not root"), accounting=acc
            ),
        )
    )
    cfg = short_dir / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{srv.path}"\n[store]\npath = "{short_dir}/harp.db"\n')
    rc, out, err = run(capsys, cfg, "health")
    assert rc == 0 and err == ""
    assert "time limits: hard (not root)" in out
    assert "accounting:  AccountingStoreFlags=job_comment,job_script" in out
    assert "recovery:    AccountingStoreFlags lacks job_env: a job that ran out can only be requeued" in out
    rc, out, _ = run(capsys, cfg, "health", "--format", "json")
    assert rc == 0 and json.loads(out)["accounting"]["job_env"] is False


def test_health_shows_the_pollers_count_and_why_it_fails():
    from harpd.cli.health_cmd import render

    quiet = render({"version": "1", "ingest": {"polls": 7, "failures": 0, "last_error": None}})
    assert "  sacct polls: 7\n" in quiet
    failing = render({"version": "1", "ingest": {"polls": 7, "failures": 2, "last_error": "slurmdbd down"}})
    assert "sacct polls: 7; 2 failed in a row: slurmdbd down" in failing
    assert "sacct polls" not in render({"version": "1", "ingest": None})  # no Slurm: nothing polled


def test_health_without_harpd_one_line(tmp_path, capsys):
    cfg = tmp_path / "harpd.toml"
    cfg.write_text(f'[server]\nsocket = "{tmp_path}/none.sock"\n[store]\npath = "{tmp_path}/harp.db"\n')
    rc, out, err = run(capsys, cfg, "health")
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("harp: harpd is not running (no socket at")
