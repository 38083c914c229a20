"""Shared plumbing of the ``bench/fuzz_*.py`` scripts (not a benchmark itself).

Each fuzz script defines ``check(data: bytes)``, which raises
``AssertionError`` (or anything else) when harp misbehaves on that input.
``main`` runs it a bounded number of times:

* with atheris (coverage-guided libFuzzer) when it is installed: in a child
  process, because libFuzzer ends the process itself when its runs are done;
  the parent reads libFuzzer's own count ("Done N runs") and any crash;
* otherwise with a seeded random mutator over the same seeds (no coverage
  guidance, but the same checks and a reproducible count).

and prints the figures: inputs tried, and failures found (target 0).  A
failing input is saved (``crash-*`` in the artifacts directory, printed) so it
can be replayed with ``python bench/fuzz_X.py --replay FILE``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def mutate(rng: random.Random, data: bytes, seeds: list[bytes], max_len: int) -> bytes:
    """One random edit: flip, insert, delete, duplicate, splice with another seed, or interesting bytes."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and buf:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 3 and buf:
            a = rng.randrange(len(buf))
            buf[pos:pos] = buf[a : a + rng.randint(1, 32)]
        elif op == 4:
            other = rng.choice(seeds)
            a = rng.randint(0, len(other))
            buf[pos:pos] = other[a : a + rng.randint(1, 64)]
        elif op == 5:
            buf[pos:pos] = rng.choice(INTERESTING)
        else:
            buf = bytearray(rng.choice(seeds)) if rng.random() < 0.3 else buf
    return bytes(buf[:max_len])


INTERESTING = [
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\\",
    b"'",
    b'"',
    b"#",
    b" ",
    b"\t",
    b"\x0b",
    b"=",
    b":",
    b"-",
    b"--",
    b"#SBATCH ",
    b"#SLURM ",
    b"--time=",
    b"-t ",
    b"$(touch /tmp/pwned)",
    b"; touch /tmp/pwned",
    b"`id`",
    b"9" * 30,
    b"9" * 4400,
    b"4294967296",
    b"-1",
    b"UNLIMITED",
    b"\xed\xb3\xbf",
    b"\xc2\xa0",
    b"\xe2\x80\xa8",
    b'{"',
    b'":',
    b"}",
    b"[",
    b"]",
    b"null",
    b"true",
    b"NaN",
    b"1e999",
    b'"v":1',
    b'"op":"register"',
]


def _random_run(
    check: Callable[[bytes], None], seeds: list[bytes], runs: int, seed: int, max_len: int, artifacts: Path
) -> tuple[int, list[str]]:
    rng = random.Random(seed)
    failures: list[str] = []
    done = 0
    for i in range(runs):
        data = rng.choice(seeds) if i < len(seeds) else mutate(rng, rng.choice(seeds), seeds, max_len)
        done += 1
        try:
            check(data)
        except Exception:  # noqa: BLE001 - every failure is a finding
            path = artifacts / f"crash-{i}"
            path.write_bytes(data)
            failures.append(f"{path}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
            if len(failures) >= 5:
                break
    return done, failures


def _atheris_child(
    load: Callable[[], Callable[[bytes], None]], instrument: Iterable[str], libfuzzer_args: list[str]
) -> None:
    import atheris

    # harp's modules are imported here, inside the hook, for coverage guidance
    with atheris.instrument_imports(include=list(instrument)):
        check = load()
    atheris.Setup([sys.argv[0], *libfuzzer_args], check)
    atheris.Fuzz()


def have_atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def main(
    name: str,
    load: Callable[[], Callable[[bytes], None]],
    seeds: list[bytes],
    *,
    default_runs: int,
    instrument: Iterable[str],
    max_len: int = 4096,
    extra: Callable[[argparse.Namespace], list[str]] | None = None,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    after: Callable[[argparse.Namespace], int] | None = None,
) -> int:
    """Parse the command line, fuzz, print FIGURE lines; the exit status (0: nothing found).

    ``load()`` imports what is fuzzed and returns the check: called inside
    atheris's import hook, so harp's modules must not be imported before it.
    ``after(args)``, if given, runs once the fuzzing is done (a second phase
    printing its own figures) and its exit status counts too.
    """
    ap = argparse.ArgumentParser(description=(sys.modules["__main__"].__doc__ or name).splitlines()[0])
    ap.add_argument("--runs", type=int, default=default_runs, help=f"inputs to try (default {default_runs})")
    ap.add_argument(
        "--engine",
        choices=["auto", "atheris", "random"],
        default="auto",
        help="atheris (coverage-guided) when installed, else a seeded random mutator",
    )
    ap.add_argument("--seed", type=int, default=1, help="random seed (reproducible runs)")
    ap.add_argument("--replay", type=Path, help="run the checks on one saved input and show the error")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    if add_arguments is not None:
        add_arguments(ap)
    args, rest = ap.parse_known_args()

    if args.replay:
        load()(args.replay.read_bytes())
        print(f"{args.replay}: no failure")
        return 0
    if args.child:
        _atheris_child(load, instrument, rest)
        return 0  # not reached: libFuzzer exits

    engine = args.engine
    if engine == "auto":
        engine = "atheris" if have_atheris() else "random"
    if engine == "atheris" and not have_atheris():
        print("atheris is not installed (pip install atheris); use --engine random", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix=f"harp-{name}-"))
    artifacts = work / "artifacts"
    artifacts.mkdir()
    scratch = work / "scratch"  # for load()'s own files (a store...): removed with work
    scratch.mkdir()
    os.environ["HARP_FUZZ_WORK"] = str(scratch)
    keep = False
    start = time.monotonic()
    try:
        if engine == "atheris":
            corpus = work / "corpus"
            corpus.mkdir()
            for i, s in enumerate(seeds):
                (corpus / f"seed-{i}").write_bytes(s)
            dictionary = work / "tokens.dict"  # libFuzzer inserts these whole: quotes, prefixes, payloads
            dictionary.write_text(
                "".join(
                    '"'
                    + "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\x{b:02x}" for b in tok)
                    + '"\n'
                    for tok in INTERESTING
                    if len(tok) <= 64
                )
            )
            argv = [
                sys.executable,
                sys.argv[0],
                "--child",
                f"-runs={args.runs}",
                f"-seed={args.seed}",
                f"-dict={dictionary}",
                f"-max_len={max_len}",
                f"-artifact_prefix={artifacts}/",
                "-print_final_stats=1",
                "-timeout=20",
                "-rss_limit_mb=4096",
                *(extra(args) if extra else []),
                str(corpus),
            ]
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", cwd=str(REPO))
            log = proc.stderr + proc.stdout
            m = re.search(r"Done (\d+) runs in (\d+) second", log)
            tried = int(m.group(1)) if m else _stat(log, "stat::number_of_executed_units")
            crashes = sorted(artifacts.iterdir())
            failures = [f"{c}" for c in crashes]
            if proc.returncode != 0 and not failures:
                failures.append(f"libFuzzer exited {proc.returncode}")
            if failures:
                tail = [ln for ln in log.splitlines() if ln.strip()][-25:]
                print("\n".join(tail), file=sys.stderr)
            cov = _stat(log, "cov:", last=True)
            print(f"{name}: atheris (libFuzzer) {tried:,} inputs, seed {args.seed}, coverage counters {cov}")
        else:
            tried, failures = _random_run(load(), seeds, args.runs, args.seed, max_len, artifacts)
            print(f"{name}: random mutator (atheris not used) {tried:,} inputs, seed {args.seed}")
        secs = time.monotonic() - start
        print(f"{name}: {secs:.1f} s, {tried / max(secs, 1e-9):,.0f} inputs/s")
        for f in failures:
            print(f"{name}: FAILURE {f}")
        keep = bool(failures)
        if keep:
            print(f"{name}: failing inputs kept in {artifacts}; replay with python {sys.argv[0]} --replay FILE")
        target = args.runs
        print(f"FIGURE {name}_inputs: {tried} inputs (target >= {target}) {'PASS' if tried >= target else 'FAIL'}")
        print(f"FIGURE {name}_failures: {len(failures)} failures (target == 0) {'PASS' if not failures else 'FAIL'}")
        code = 0 if (not failures and tried >= target) else 1
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    if after is not None:
        code = max(code, after(args))
    return code


def _stat(log: str, key: str, last: bool = False) -> int:
    if key == "cov:":
        found = re.findall(r"\bcov: (\d+)", log)
        return int(found[-1]) if found else 0
    m = re.search(re.escape(key) + r":\s*(\d+)", log)
    return int(m.group(1)) if m else 0
