"""harp's benchmarks: one script per figure family, one runner (``python -m bench``).

Every ``bench/<name>.py`` is a standalone script that measures something and
prints, for each figure it measures, one line::

    FIGURE <name>: <measured> <unit> (target <op> <value>) PASS|FAIL

This package holds what the runner needs to find the scripts and read those
lines; the scripts themselves use only its private helpers (``_traces``: where
the real traces are; ``_fuzzing``), and each stays runnable on its own as
``python bench/<name>.py``.

How a script is run is declared in the script itself, in comment lines near
its top (so adding a benchmark needs no edit here)::

    # bench: slow                  skipped by ``python -m bench --quick``
    # bench: timeout=1200          seconds before the runner gives up (default 900)
    # bench: args=--n 100000       extra arguments when run by the runner

``DEFAULTS`` below says the same for scripts written before these markers
existed; a marker in the script wins.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_TIMEOUT_S = 900.0

#: How the runner treats scripts that carry no ``# bench:`` markers.
DEFAULTS: dict[str, dict[str, object]] = {
    "import_speed": {"slow": True, "timeout": 1800},  # a million records through `harp import`
    "report_speed": {"slow": True, "timeout": 1800},  # generates a million-job store first
    "store_insert": {"slow": True},  # a million upserts
    "submit_overhead": {"slow": False, "timeout": 600},
}

FIGURE_RE = re.compile(
    r"^FIGURE\s+(?P<name>[^\s:]+):\s+(?P<body>.*?)\s+"
    r"\(target\s+(?P<op><=|>=|==|!=|<|>|=)\s*(?P<target>[^()]*?)\s*\)\s+"
    r"(?P<verdict>PASS|FAIL)(?P<rest>\s.*)?$"
)
_MARKER_RE = re.compile(r"^#\s*bench:\s*(?P<key>[a-z_-]+)\s*(?:=\s*(?P<value>.*?))?\s*$")
_NUMBER_RE = re.compile(r"^[+-]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass
class Figure:
    """One ``FIGURE`` line, taken apart."""

    name: str
    measured: str  # the number as printed (or a word such as "failed")
    unit: str
    op: str
    target: str  # value as printed, unit included when the script gave one
    verdict: str  # PASS or FAIL as the script decided
    line: str
    note: str = ""  # text after the verdict (not part of the format; kept for display)

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def check(self) -> str | None:
        """Why the printed verdict contradicts the printed numbers, or None.

        Only checked when both sides are plain numbers in the same unit (or
        the target gives none): the script's own verdict is otherwise trusted.
        """
        m = _number(self.measured)
        t_num, t_unit = _split_number(self.target)
        if m is None or t_num is None or (t_unit and t_unit.split()[0] != (self.unit.split() or [""])[0]):
            return None
        ok = _compare(m, self.op, t_num)
        if ok is None or ok == self.passed:
            return None
        return f"printed {self.verdict} but {self.measured} {self.op} {self.target} is {ok}"


def _number(text: str) -> float | None:
    m = _NUMBER_RE.match(text.strip())
    if not m or m.end() != len(text.strip()):
        return None
    try:
        return float(m.group(0).replace(",", "").replace("_", ""))
    except ValueError:
        return None


def _split_number(text: str) -> tuple[float | None, str]:
    text = text.strip()
    m = _NUMBER_RE.match(text)
    if not m:
        return None, text
    try:
        return float(m.group(0).replace(",", "").replace("_", "")), text[m.end() :].strip()
    except ValueError:
        return None, text


def _compare(a: float, op: str, b: float) -> bool | None:
    return {
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
        "==": a == b,
        "=": a == b,
        "!=": a != b,
    }.get(op)


def parse_figure(line: str) -> Figure | None:
    """The figure on one output line, or None if the line is not a FIGURE line."""
    m = FIGURE_RE.match(line.rstrip("\n"))
    if not m:
        return None
    body = m.group("body").strip()
    measured, _, unit = body.partition(" ")
    return Figure(
        name=m.group("name"),
        measured=measured,
        unit=unit.strip(),
        op=m.group("op"),
        target=m.group("target"),
        verdict=m.group("verdict"),
        line=line.rstrip("\n"),
        note=(m.group("rest") or "").strip(),
    )


def malformed_figure_lines(output: str) -> list[str]:
    """Lines that start with ``FIGURE`` but do not follow the format."""
    return [ln for ln in output.splitlines() if ln.startswith("FIGURE") and parse_figure(ln) is None]


@dataclass
class Script:
    """A benchmark script and how the runner runs it."""

    path: Path
    slow: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    args: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem


def read_markers(path: Path) -> dict[str, object]:
    """The ``# bench: ...`` markers among the script's first 60 lines."""
    out: dict[str, object] = {}
    try:
        head = path.read_text(encoding="utf-8", errors="replace").splitlines()[:60]
    except OSError:
        return out
    for line in head:
        m = _MARKER_RE.match(line.strip())
        if not m:
            continue
        key, value = m.group("key").replace("-", "_"), m.group("value")
        if key == "slow":
            out["slow"] = value is None or value.lower() in ("1", "true", "yes")
        elif key == "timeout" and value:
            out["timeout"] = float(value)
        elif key == "args" and value is not None:
            out["args"] = value
    return out


def discover(directory: Path = BENCH_DIR) -> list[Script]:
    """Every ``bench/*.py`` script (not ``_private`` modules), in name order."""
    scripts = []
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        conf = dict(DEFAULTS.get(path.stem, {}))
        conf.update(read_markers(path))
        args = conf.get("args", [])
        scripts.append(
            Script(
                path=path,
                slow=bool(conf.get("slow", False)),
                timeout_s=float(conf.get("timeout", DEFAULT_TIMEOUT_S)),  # type: ignore[arg-type]
                args=shlex.split(args) if isinstance(args, str) else list(args),  # type: ignore[arg-type]
            )
        )
    return scripts
