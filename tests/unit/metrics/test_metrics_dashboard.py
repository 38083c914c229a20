"""etc/grafana-harp.json queries only metrics harpd's registry has, with their own labels and values."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harpd.metrics import registry as r
from harpd.metrics.registry import REGISTRY

DASHBOARD = Path(__file__).resolve().parents[3] / "etc" / "grafana-harp.json"
#: the sample names each kind of family exposes
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
#: labels Prometheus adds at scrape time (scrape config), not harpd
TARGET_LABELS = {"job", "instance"}
NAME = re.compile(r"\b((?:harp|process)_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b((?:harp|process)_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"')
BY = re.compile(r"\bby\s*\(([^)]*)\)")


def exposed() -> dict[str, set[str]]:
    """Every sample name the registry exposes, with the label names its family has."""
    names: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        labels = {k for s in family.samples for k in s.labels} - {"le"}
        metric = REGISTRY._names_to_collectors.get(family.name + "_total") or REGISTRY._names_to_collectors.get(
            family.name
        )
        labels |= set(getattr(metric, "_labelnames", ()))
        for suffix in SUFFIXES.get(family.type, ("",)):
            names[family.name + suffix] = labels
    return names


def queries() -> list[str]:
    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "definition") and isinstance(v, str):
                    yield v
                elif k == "query" and isinstance(v, dict | str):
                    yield from ([v] if isinstance(v, str) else walk(v))
                else:
                    yield from walk(v)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    return list(walk(json.loads(DASHBOARD.read_text())))


BOUNDED = {
    "resource": set(r.RESOURCES),
    "outcome": {*r.DECISION_OUTCOMES, *r.EXTENSION_OUTCOMES, *r.RECOVERY_OUTCOMES},
    "reason": {*r.DECISION_REASONS, *r.EXTENSION_REASONS, *r.REFUSAL_REASONS},
    "result": set(r.POLL_RESULTS),
}


def test_every_metric_the_dashboard_uses_exists():
    have = exposed()
    used = {name for q in queries() for name in NAME.findall(q)}
    assert len(used) >= 12, used  # the dashboard covers what the issue lists
    missing = sorted(used - set(have))
    assert not missing, f"etc/grafana-harp.json queries metrics harpd does not have: {missing}"


def test_every_label_the_dashboard_selects_or_groups_by_is_the_metrics_own():
    have = exposed()
    for q in queries():
        for name, body in SELECTOR.findall(q):
            for label, val in MATCHER.findall(body):
                if label in TARGET_LABELS:
                    continue
                assert label in have[name], f"{q}: {name} has no label {label!r}"
                assert "$" in val or val in BOUNDED.get(label, {val}), f"{q}: {label}={val!r} never occurs"
        names = NAME.findall(q)
        for group in BY.findall(q):
            for label in (g.strip() for g in group.split(",")):
                if label in TARGET_LABELS | {"le"}:
                    continue
                assert any(label in have[n] for n in names), f"{q}: grouped by {label!r}, which none of {names} has"


def test_the_dashboard_is_importable():
    data = json.loads(DASHBOARD.read_text())
    assert data["uid"] and data["title"] and data["panels"]
    assert {i["name"] for i in data["__inputs"]} == {"DS_PROMETHEUS"}
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
