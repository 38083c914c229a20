"""``python -m bench``: run every benchmark, print one table, fail if any figure fails.

Each ``bench/*.py`` runs as its own process (a crash or a hang in one cannot
take the others down; each gets the machine to itself), with a time limit.
Its ``FIGURE`` lines are collected into one table: figure, target, measured,
pass or fail.  The exit status is 0 only when every figure passed and every
script ran to the end; a script that printed no figure (it crashed, timed
out, or lacked a prerequisite such as the Slurm cluster) is an error row.

    python -m bench                  everything (slow ones included)
    python -m bench --quick          skip the scripts marked slow
    python -m bench --only load_submit --only fuzz_protocol
    python -m bench --list           what would run, and how
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from bench import BENCH_DIR, Figure, Script, discover, malformed_figure_lines, parse_figure

REPO = BENCH_DIR.parent


@dataclass
class Outcome:
    script: Script
    figures: list[Figure] = field(default_factory=list)
    returncode: int | None = None
    seconds: float = 0.0
    error: str | None = None  # why the script counts as failed besides its figures
    skipped: str | None = None


def run_script(script: Script, timeout_s: float, verbose: bool) -> Outcome:
    """Run one script to completion (or its time limit) and read its figures."""
    argv = [sys.executable, str(script.path), *script.args]
    out = Outcome(script)
    start = time.monotonic()
    # own process group: on a timeout the script's children (harpd, sbatch...) go too
    proc = subprocess.Popen(
        argv,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = start + timeout_s
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        buf = ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(argv, timeout_s)
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536).decode("utf-8", "replace")
            if not chunk:
                break
            buf += chunk
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                lines.append(line)
                if verbose:
                    print(f"  {script.name}| {line}", file=sys.stderr, flush=True)
        if buf:
            lines.append(buf)
        out.returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out.error = f"timed out after {timeout_s:g} s"
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        out.seconds = time.monotonic() - start
    text = "\n".join(lines)
    out.figures = [f for f in (parse_figure(ln) for ln in lines) if f is not None]
    bad = malformed_figure_lines(text)
    if out.error is None:
        if bad:
            out.error = f"malformed FIGURE line: {bad[0]!r}"
        elif not out.figures:
            tail = [ln for ln in lines if ln.strip()][-1:] or ["no output"]
            out.error = f"no FIGURE line (exit {out.returncode}): {tail[0][:160]}"
        elif out.returncode not in (0, None) and all(f.passed for f in out.figures):
            out.error = f"exited {out.returncode} although every figure passed"
    if not verbose and (out.error or any(not f.passed for f in out.figures)):
        for ln in lines[-15:]:
            print(f"  {script.name}| {ln}", file=sys.stderr)
    return out


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def table(outcomes: list[Outcome]) -> tuple[str, bool]:
    """The results table and whether everything passed."""
    rows = [("figure", "target", "measured", "result", "script")]
    ok = True
    for o in outcomes:
        if o.skipped:
            rows.append(("-", "-", "-", "SKIP", f"{o.script.name} ({o.skipped})"))
            continue
        for f in o.figures:
            result = f.verdict
            contradiction = f.check()
            if contradiction:
                result = "FAIL*"
                ok = False
            ok &= f.passed
            measured = f"{f.measured} {f.unit}".strip()
            rows.append((f.name, f"{f.op} {f.target}", measured, result, o.script.name))
        if o.error:
            ok = False
            rows.append(("-", "-", "-", "ERROR", f"{o.script.name}: {o.error}"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:4])) + "  " + r[4])
        if k == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
    notes = [f"  * {f.name}: {f.check()}" for o in outcomes for f in o.figures if f.check()]
    return "\n".join(lines + notes), ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the scripts marked slow")
    ap.add_argument("--only", action="append", metavar="NAME", help="run only this script (repeatable)")
    ap.add_argument("--timeout", type=float, help="time limit per script in seconds (default: each script's own)")
    ap.add_argument("--list", action="store_true", help="list the scripts and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo every script's output as it runs")
    args = ap.parse_args(argv)

    scripts = discover()
    if args.only:
        known = {s.name for s in scripts}
        unknown = [n for n in args.only if n.removesuffix(".py") not in known]
        if unknown:
            print(f"bench: no script {unknown[0]!r} in {BENCH_DIR} (have: {', '.join(sorted(known))})", file=sys.stderr)
            return 2
        wanted = {n.removesuffix(".py") for n in args.only}
        scripts = [s for s in scripts if s.name in wanted]
    if args.list:
        for s in scripts:
            extra = f" args: {' '.join(s.args)}" if s.args else ""
            print(f"{s.name:<20} {'slow' if s.slow else 'quick':<5} timeout {s.timeout_s:g} s{extra}")
        return 0

    outcomes: list[Outcome] = []
    for s in scripts:
        if args.quick and s.slow and not args.only:
            outcomes.append(Outcome(s, skipped="slow; run without --quick"))
            continue
        limit = args.timeout or s.timeout_s
        print(f"bench: running {s.name} (limit {limit:g} s) ...", file=sys.stderr, flush=True)
        o = run_script(s, limit, args.verbose)
        print(
            f"bench: {s.name} done in {o.seconds:.0f} s{'' if not o.error else ' -- ' + o.error}",
            file=sys.stderr,
            flush=True,
        )
        outcomes.append(o)
    text, ok = table(outcomes)
    print(text)
    ran = [o for o in outcomes if not o.skipped]
    print(
        f"\n{sum(len(o.figures) for o in ran)} figures from {len(ran)} scripts"
        f"{f', {len(outcomes) - len(ran)} skipped' if len(ran) < len(outcomes) else ''}: "
        f"{'all PASS' if ok else 'FAILURES'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
