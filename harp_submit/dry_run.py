"""harpd's decision in words, for ``--harp-dry-run`` (``--harp-json`` prints the JSON instead).

A user trying harp reads the dry run to learn what harp would do and why:
each change with its reason, each resource harp left alone with the reason it
did, and the partition's caps.  Only what harpd sent is shown; values of a
shape harp does not expect are shown as they are, never trusted further.
"""

from __future__ import annotations

from .units import format_time

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from .wire import DecisionDict

#: the options each resource of harpd's explanation changes, and its name for people
_RESOURCES = (
    ("time", "time limit", ("time", "time-min")),
    ("mem", "memory", ("mem", "mem-per-cpu", "mem-per-gpu")),
    ("cores", "cores", ("cpus-per-task", "ntasks", "ntasks-per-node", "nodes", "tres-per-task")),
)


def _text(value: object, limit: int = 300) -> str:
    """One line of harpd's text, bounded: no newline or control character reaches the terminal."""
    s = str(value)
    s = "".join(c if c.isprintable() else " " for c in s)
    return s[:limit]


def _why(decision: DecisionDict, resource: str | None = None) -> str | None:
    """harpd's reason for the whole request (``resource`` None) or for one resource it kept.

    The typed fields (``reason``, ``kept``); from a harpd older than them, the
    same words where it sent them, in ``explain`` (``reason``, ``<resource>.reason``).
    """
    typed = decision.get("reason") if resource is None else _mapping(decision.get("kept")).get(resource)
    if isinstance(typed, str) and typed:
        return typed
    explain = _mapping(decision.get("explain"))
    loose = explain.get("reason") if resource is None else _mapping(explain.get(resource)).get("reason")
    return loose if isinstance(loose, str) and loose else None


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def decision_lines(decision: DecisionDict) -> list[str]:
    """The decision, one line each (without the ``harp:`` prefix)."""
    model = decision.get("model")
    out = [f"decision ({'model ' + _text(model, 60) if isinstance(model, str) and model else 'no model'}):"]
    changed: set[str] = set()
    for c in decision.get("changes") or []:
        if not isinstance(c, dict):
            continue
        option = _text(c.get("option"), 40)
        changed.add(option)
        old = c.get("old")
        line = f"  --{option} {_text(old, 40) if old else '(not set)'} -> {_text(c.get('value'), 40)}"
        if c.get("reason"):
            line += f": {_text(c['reason'])}"
        out.append(line)
    for key, words, options in _RESOURCES:
        if changed & set(options):
            continue
        reason = _why(decision, key)
        if reason:
            out.append(f"  {words} kept as written: {_text(reason)}")
    if len(out) == 1:
        why = _why(decision)
        out.append("  your request is kept as written" + (f": {_text(why)}" if isinstance(why, str) and why else ""))
    limits = decision.get("limits")
    if isinstance(limits, dict):
        caps = []
        max_time, max_mem, max_cpus = limits.get("max_time_s"), limits.get("max_mem_mb"), limits.get("max_cpus")
        if isinstance(max_time, int) and max_time > 0:
            caps.append(f"time {format_time(max_time)}")
        if isinstance(max_mem, int) and max_mem > 0:
            caps.append(f"memory {max_mem} MB per node")
        if isinstance(max_cpus, int) and max_cpus > 0:
            caps.append(f"{max_cpus} cores per node")
        part = limits.get("partition")
        if caps or part:
            where = f"partition {_text(part, 60)}" if part else "the partition"
            out.append(f"  {where} allows at most: {', '.join(caps)}" if caps else f"  {where}: no caps known")
    return out
