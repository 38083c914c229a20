"""``python -m bench``: finds the scripts, reads their FIGURE lines, fails when a figure fails.

The runner is what CI and the lead read the project's figures from, so its
own failure modes are tested: a failing figure, a verdict contradicted by the
numbers, a malformed line, a crash, a hang past the time limit, --quick.
Every real bench script is also checked to print its figures in the format.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

import bench  # noqa: E402
from bench import __main__ as runner  # noqa: E402
from bench import discover, parse_figure  # noqa: E402


@pytest.mark.parametrize(
    "line, expect",
    [
        (
            "FIGURE store_insert: 12.3 s per 1M records (target < 60) PASS",
            ("store_insert", "12.3", "s per 1M records", "<", "60", "PASS"),
        ),
        (
            "FIGURE import_speed: 1,234,567 records/s (target >= 100,000) FAIL",
            ("import_speed", "1,234,567", "records/s", ">=", "100,000", "FAIL"),
        ),
        (
            "FIGURE x: failed (exit 1) (target >= 5 records/s) FAIL",
            ("x", "failed", "(exit 1)", ">=", "5 records/s", "FAIL"),
        ),
        (
            "FIGURE load_submit_errors: 0 errors (target == 0) PASS",
            ("load_submit_errors", "0", "errors", "==", "0", "PASS"),
        ),
    ],
)
def test_figure_lines_are_read(line: str, expect: tuple) -> None:
    f = parse_figure(line)
    assert f is not None
    assert (f.name, f.measured, f.unit, f.op, f.target, f.verdict) == expect


@pytest.mark.parametrize(
    "line",
    [
        "FIGURE x: 5 ms PASS",
        "FIGURE x 5 ms (target < 3) PASS",
        "FIGURE x: 5 ms (target < 3) OK",
        "figure x: 5 ms (target < 3) PASS",
    ],
)
def test_malformed_figure_lines_are_not_figures(line: str) -> None:
    assert parse_figure(line) is None


def test_a_verdict_the_numbers_contradict_is_caught() -> None:
    assert parse_figure("FIGURE x: 5 ms (target <= 3 ms) PASS").check() is not None
    assert parse_figure("FIGURE x: 5 ms (target <= 30 ms) PASS").check() is None
    assert parse_figure("FIGURE x: 5 ms (target <= 3 s) PASS").check() is None  # other units: trusted


SCRIPTS = {
    "a_pass.py": "print('FIGURE a_pass: 3 ms (target <= 5) PASS')\n",
    "b_fail.py": "print('FIGURE b_fail: 9 ms (target <= 5) FAIL')\nraise SystemExit(1)\n",
    "c_liar.py": "print('FIGURE c_liar: 9 ms (target <= 5 ms) PASS')\n",
    "d_malformed.py": "print('FIGURE d: fast (target quick) PASS')\n",
    "e_crash.py": "raise RuntimeError('boom')\n",
    "f_hang.py": "import time\nprint('started', flush=True)\ntime.sleep(60)\n",
    "g_slow.py": "# bench: slow\n# bench: timeout=5\n# bench: args=--n 3\n"
    "import sys\nprint(f'FIGURE g_slow: {sys.argv[2]} s (target < 10) PASS')\n",
    "_helper.py": "raise SystemExit('never run')\n",
}


@pytest.fixture
def fake_bench(tmp_path: Path) -> Path:
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_discovery_reads_markers_and_skips_private_modules(fake_bench: Path) -> None:
    found = {s.name: s for s in discover(fake_bench)}
    assert "_helper" not in found and len(found) == 7
    assert found["g_slow"].slow and found["g_slow"].timeout_s == 5 and found["g_slow"].args == ["--n", "3"]
    assert not found["a_pass"].slow and found["a_pass"].timeout_s == bench.DEFAULT_TIMEOUT_S


def test_each_outcome_of_a_script_lands_in_the_table(fake_bench: Path) -> None:
    scripts = {s.name: s for s in discover(fake_bench)}
    out = {name: runner.run_script(s, 3 if name == "f_hang" else 30, verbose=False) for name, s in scripts.items()}
    assert out["a_pass"].error is None and [f.verdict for f in out["a_pass"].figures] == ["PASS"]
    assert out["b_fail"].error is None and [f.verdict for f in out["b_fail"].figures] == ["FAIL"]
    assert "malformed FIGURE line" in out["d_malformed"].error
    assert "no FIGURE line (exit 1)" in out["e_crash"].error and "boom" in out["e_crash"].error
    assert out["f_hang"].error == "timed out after 3 s" and out["f_hang"].seconds < 20
    assert out["g_slow"].figures[0].measured == "3"  # its args were passed

    text, ok = runner.table([out["a_pass"]])
    assert ok and re.search(r"a_pass\s+<= 5\s+3 ms\s+PASS\s+a_pass", text)
    text, ok = runner.table([out["c_liar"]])
    assert not ok and "FAIL*" in text and "printed PASS but 9 <= 5 ms is False" in text
    for name in ("b_fail", "d_malformed", "e_crash", "f_hang"):
        assert runner.table([out[name]])[1] is False


def test_the_command_exits_non_zero_on_any_failure_and_quick_skips_slow(fake_bench: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(runner, "discover", lambda: discover(fake_bench))
    assert runner.main(["--only", "a_pass", "--only", "g_slow"]) == 0
    assert runner.main(["--only", "b_fail"]) == 1
    assert runner.main(["--only", "nope"]) == 2
    capsys.readouterr()
    monkeypatch.setattr(runner, "discover", lambda: [s for s in discover(fake_bench) if s.name in ("a_pass", "g_slow")])
    assert runner.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "SKIP" in out and "g_slow (slow; run without --quick)" in out and "1 skipped" in out


@pytest.mark.parametrize(
    "script", sorted(p for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_")), ids=lambda p: p.name
)
def test_every_bench_script_prints_well_formed_figures(script: Path) -> None:
    """Statically: each FIGURE the script prints follows the format (checked on its source text)."""
    text = script.read_text()
    if "FIGURE" not in text and "_fuzzing" in text:
        text = (script.parent / "_fuzzing.py").read_text()  # the fuzz scripts print through the helper
    assert "FIGURE" in text, f"{script.name} prints no FIGURE line"
    for m in re.finditer(r'f?"FIGURE [^\n]*', text):
        line = m.group(0)
        assert re.search(r"\(target [<>=!]{1,2} ", line) or "figure(" in text, line
    proc = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300, cwd=str(REPO)
    )
    assert proc.returncode == 0, proc.stderr  # importable and documented, with no side effects
