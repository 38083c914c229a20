"""`harp --help` describes every subcommand; `--config` works before and after the subcommand."""

from __future__ import annotations

import contextlib
import importlib
import io

import pytest

from harpd.cli.main import SUBCOMMANDS
from harpd.cli.main import main as harp
from harpd.records import JobRecord, Outcome
from harpd.store import Store


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = harp(argv)
        except SystemExit as exc:  # argparse: --help, or an option it does not know
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def test_help_gives_every_subcommand_its_one_line_description():
    rc, out, _ = _run(["--help"])
    assert rc == 0 and "(see harp" not in out
    flat = " ".join(out.split())  # argparse wraps long lines
    for name, module in SUBCOMMANDS.items():
        help_line = importlib.import_module(f"harpd.cli.{module}").HELP
        assert help_line and "\n" not in help_line
        assert f"{name} {' '.join(help_line.split())}" in flat, name


@pytest.fixture
def configured(tmp_path, no_harpd):
    """A config whose store holds job 5, and a decoy config whose store does not exist."""
    with Store.open(tmp_path / "harp.db") as store:
        store.insert_jobs([JobRecord(job_id="5", source="c", user="me", end_time=1.7e9, outcome=Outcome.COMPLETED)])
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(f'[store]\npath = "{tmp_path / "harp.db"}"\n')
    bad.write_text(f'[store]\npath = "{tmp_path / "none.db"}"\n')
    return good, bad


def test_config_after_the_subcommand_is_honoured(configured):
    good, bad = configured
    rc, out, err = _run(["status", "5", "--direct", "--config", str(good)])
    assert rc == 0 and "job 5: me" in out, err
    rc, out, _ = _run(["--config", str(good), "status", "5", "--direct"])
    assert rc == 0 and "job 5: me" in out
    # given twice, the one after the subcommand (nearer the command) wins
    rc, out, _ = _run(["--config", str(bad), "status", "5", "--direct", "--config", str(good)])
    assert rc == 0 and "job 5: me" in out
    rc, _, err = _run(["status", "5", "--direct", "--config", str(bad)])
    assert rc == 2 and "cannot open the store " in err and "none.db" in err


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_takes_config_after_its_name(name):
    rc, out, _ = _run([name, "--help"])
    assert rc == 0 and "--config" in out
