"""Sizey's memory wastage (Bader et al., CLUSTER 2024), so harp's figures sit beside the paper's.

For a task with usage ``y`` and runtime ``t`` that gets the attempts
``a_0 < ... < a_k`` (the last one fits): under-sizing ``sum(a_j * t, j<k)``
(a failed attempt runs its full runtime before it fails), over-sizing
``(a_k - y) * t``, failures ``k``.  Units: bytes and seconds in, GB·h out
(decimal GB, as the paper's code: 1e9 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

GBH = 1e9 * 3600.0  # bytes·seconds in one GB·h


class WastageFigures(TypedDict):
    """One predictor's row of Sizey's table (``Wastage.to_dict``): GB·h, counts."""

    tasks: int
    failures: int
    wastage_gbh: float
    under_gbh: float
    over_gbh: float
    used_gbh: float


@dataclass(slots=True)
class Wastage:
    """Running totals of one predictor over the tasks it sized."""

    tasks: int = 0
    failures: int = 0
    under_gbh: float = 0.0
    over_gbh: float = 0.0
    used_gbh: float = 0.0

    @property
    def wastage_gbh(self) -> float:
        return self.under_gbh + self.over_gbh

    def add(self, allocations: Sequence[float], usage: float, runtime_s: float) -> None:
        """One task's attempts (the last one fits) against its usage, all in bytes."""
        if not allocations or allocations[-1] < usage:
            raise ValueError("the last attempt must fit the task's usage")
        self.tasks += 1
        self.failures += len(allocations) - 1
        self.under_gbh += sum(allocations[:-1]) * runtime_s / GBH
        self.over_gbh += (allocations[-1] - usage) * runtime_s / GBH
        self.used_gbh += usage * runtime_s / GBH

    def to_dict(self) -> WastageFigures:
        return WastageFigures(
            tasks=self.tasks,
            failures=self.failures,
            wastage_gbh=self.wastage_gbh,
            under_gbh=self.under_gbh,
            over_gbh=self.over_gbh,
            used_gbh=self.used_gbh,
        )
