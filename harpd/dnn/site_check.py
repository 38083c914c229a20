"""Does the site's ``[dnn] gpu_types`` config match what Slurm says the partitions have?

GPU memory per card is not something Slurm knows, so the admin writes it in the
config; but the partition, the GRES type and the GPUs per node Slurm does know,
and a config that disagrees would make harp request GPUs that do not exist
(a job that pends forever) or leave GPUs unused.  The check takes the backend's
``partitions()`` data (``harpd.slurm.base.PartitionInfo``) rather than calling
Slurm, so it runs on recorded output in tests and on live data in harpd.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_GRES_ITEM = re.compile(r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]+))?(?::(?P<count>[0-9]+[KMG]?))?")


def parse_gres(gres: str | None) -> list[tuple[str, str | None, int]]:
    """``gpu:a100:4(S:0-1),gpu:v100:2`` -> [("gpu", "a100", 4), ("gpu", "v100", 2)].

    A bare ``gpu:4`` has no type; ``gpu:a100`` (count omitted) means 1.
    """
    out: list[tuple[str, str | None, int]] = []
    if not gres or gres in ("(null)", "N/A"):
        return out
    # split on commas outside parentheses (socket lists contain commas)
    depth, start, items = 0, 0, []
    for i, ch in enumerate(gres):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(gres[start:i])
            start = i + 1
    items.append(gres[start:])
    for item in items:
        m = _GRES_ITEM.match(item.strip())
        if not m:
            continue
        name, typ, count = m.group("name"), m.group("type"), m.group("count")
        if count is None and typ is not None and typ.isdigit():
            typ, count = None, typ
        n = 1
        if count:
            mult = {"K": 1000, "M": 10**6, "G": 10**9}.get(count[-1], 1)
            n = int(count.rstrip("KMG")) * mult
        out.append((name, typ, n))
    return out


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


@dataclass
class SiteCheck:
    """Problems found (one line each) and what the planner may use per GPU type."""

    problems: list[str] = field(default_factory=list)
    max_nodes: dict[str, int] = field(default_factory=dict)  # 0: unusable
    gpus_per_node: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_gpu_types(gpu_types: Iterable[Any], partitions: Mapping[str, Any]) -> SiteCheck:
    """Compare each configured GPU type with its partition's GRES and node count."""
    result = SiteCheck()
    for gt in gpu_types:
        name, pname, gpn = gt.name, gt.partition, gt.gpus_per_node
        part = partitions.get(pname)
        if part is None:
            known = ", ".join(sorted(partitions)) or "none"
            result.problems.append(f"[dnn] gpu type {name}: partition '{pname}' does not exist (Slurm has: {known})")
            result.max_nodes[name] = 0
            continue
        gres = _get(part, "gres")
        gpus = [(t, n) for (g, t, n) in parse_gres(gres) if g == "gpu"]
        typed = [n for (t, n) in gpus if t == name]
        untyped = [n for (t, n) in gpus if t is None]
        if typed:
            have = max(typed)
        elif untyped:
            have = max(untyped)
            result.problems.append(
                f"[dnn] gpu type {name}: partition '{pname}' has GPUs without a "
                f"type (gres {gres}); harp requests gpu:{name}:N, which Slurm "
                "will refuse: name the GPU type in slurm.conf's Gres="
            )
            result.max_nodes[name] = 0
            continue
        else:
            types = sorted({t for (t, _) in gpus if t}) or ["none"]
            result.problems.append(
                f"[dnn] gpu type {name}: partition '{pname}' has no gpu:{name} GRES (its GPU types: {', '.join(types)})"
            )
            result.max_nodes[name] = 0
            continue
        if have != gpn:
            result.problems.append(
                f"[dnn] gpu type {name}: config says gpus_per_node={gpn} but "
                f"partition '{pname}' nodes have gpu:{name}:{have}"
            )
        result.gpus_per_node[name] = min(have, gpn)
        nodes = _get(part, "nodes") or 0
        if isinstance(nodes, (list, tuple)):
            nodes = len(nodes)
        cap = _get(part, "max_nodes")
        if isinstance(cap, int) and cap > 0:
            nodes = min(int(nodes), cap)
        if not nodes:
            result.problems.append(f"[dnn] gpu type {name}: partition '{pname}' has no nodes")
        result.max_nodes[name] = int(nodes)
    return result
