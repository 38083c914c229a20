"""sacct's time forms and filters in `harp report` (-S/-E, -u, -A, -r, --source), and bad values."""

from datetime import datetime

import pytest
from report_helpers import DAY, job

from harpd.cli import report_cmd
from harpd.cli.main import main
from harpd.report.window import parse_when
from harpd.store import Store

NOW = datetime(2026, 5, 20, 15, 30).timestamp()  # a Wednesday afternoon, local time


@pytest.mark.parametrize(
    "text, want",
    [
        ("now-7days", NOW - 7 * DAY),
        ("now-2hours", NOW - 7200),
        ("now-1hour", NOW - 3600),
        ("now-30minutes", NOW - 1800),
        ("now-90", NOW - 90),  # seconds by default
        ("now+1day", NOW + DAY),
        ("now-2weeks", NOW - 14 * DAY),
        ("today", datetime(2026, 5, 20).timestamp()),
        ("midnight", datetime(2026, 5, 20).timestamp()),
        ("noon", datetime(2026, 5, 20, 12).timestamp()),
        ("08:15", datetime(2026, 5, 20, 8, 15).timestamp()),
        ("16:00", datetime(2026, 5, 19, 16).timestamp()),  # later today: sacct reads it as yesterday's
        ("0501", datetime(2026, 5, 1).timestamp()),
        ("050124", datetime(2024, 5, 1).timestamp()),
        ("0601", datetime(2025, 6, 1).timestamp()),  # no year, not yet this year: last year's
        ("05/01/24", datetime(2024, 5, 1).timestamp()),
        ("05.01.2024", datetime(2024, 5, 1).timestamp()),
        ("05/01-10:30", datetime(2026, 5, 1, 10, 30).timestamp()),
        ("2024-05-01T08:00:30", datetime(2024, 5, 1, 8, 0, 30).timestamp()),
    ],
)
def test_sacct_time_forms(text, want):
    assert parse_when(text, NOW) == pytest.approx(want)


@pytest.mark.parametrize("text", ["99999999d", "now-99999999999weeks", "now+9999999999days"])
def test_a_span_outside_the_calendar_is_a_clear_error(text):
    with pytest.raises(ValueError, match=r"--since .*outside the calendar.*'all'"):
        parse_when(text, NOW)


@pytest.fixture
def site(tmp_path, monkeypatch):
    db = tmp_path / "harp.db"
    end = datetime.now().timestamp() - 3 * 3600  # three hours ago
    with Store.open(db) as s:
        s.insert_jobs(
            [
                job("1", user="alice", account="physics", partition="cpu", end_time=end),
                job("2", user="bob", account="chem", partition="gpu", end_time=end),
                job("3", user="carol", account="chem", partition="cpu", end_time=end - 30 * DAY),
                job("1", source="ctc", user="alice", account="physics", partition="cpu", end_time=end),
            ]
        )
    conf = tmp_path / "harpd.toml"
    conf.write_text(f'[store]\npath = "{db}"\n[report]\ndefault_window_days = 36500\n')
    monkeypatch.delenv("HARP_CONFIG", raising=False)
    monkeypatch.setattr(report_cmd.os, "getuid", lambda: 0)  # root: everyone's jobs
    return conf


def report_json(site, capsys, *args):
    import json

    assert main(["--config", str(site), "report", "--format", "json", *args]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def keys(d):
    return sorted((g["key"], g["source"]) for g in d["groups"])


def test_sacct_options_filter_the_report(site, capsys):
    assert report_json(site, capsys, "-S", "now-7days")["total"]["jobs"] == 3  # carol's ended a month ago
    assert report_json(site, capsys, "--starttime", "now-60days", "--endtime", "now-7days")["total"]["jobs"] == 1
    assert report_json(site, capsys, "-S", "now-60days", "-E", "now")["total"]["jobs"] == 4
    assert keys(report_json(site, capsys, "-u", "alice,carol", "-S", "all")) == [
        ("alice", "ctc"),
        ("alice", "slurm"),
        ("carol", "slurm"),
    ]
    assert keys(report_json(site, capsys, "-A", "chem", "-S", "all")) == [("bob", "slurm"), ("carol", "slurm")]
    assert keys(report_json(site, capsys, "-r", "cpu", "-A", "physics,chem", "-S", "all")) == [
        ("alice", "ctc"),
        ("alice", "slurm"),
        ("carol", "slurm"),
    ]
    d = report_json(site, capsys, "--partition", "gpu", "-S", "all")
    assert keys(d) == [("bob", "slurm")] and "in partition gpu" in d["scope"]
    assert keys(report_json(site, capsys, "--account", "physics", "--source", "ctc", "-S", "all")) == [("alice", "ctc")]


@pytest.mark.parametrize(
    "args, names",
    [
        (["--since", "99999999d"], ["99999999d", "'all'"]),
        (["-S", "last tuesday"], ["'last tuesday'", "now-7days", "today"]),
        (["-E", "now-99999999999weeks"], ["--until", "now-99999999999weeks"]),
        (["-A", ","], ["--account", "no name given"]),
        (["-u", " "], ["--user", "no name given"]),
    ],
)
def test_bad_values_are_one_line_exit_2(site, capsys, args, names):
    assert main(["--config", str(site), "report", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for n in names:
        assert n in err
