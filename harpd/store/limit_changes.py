"""The ``limit_changes`` table: harpd's changes of a live job's limits, one per crossing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harpd.records import LimitChange
from harpd.store.base import StoreBase
from harpd.store.columns import _q


@dataclass(frozen=True, slots=True)
class Resize:
    """A re-size of a pending job's memory (MB) or CPUs per task, from ``old`` to ``new``, beside its time limit."""

    old: int
    new: int


class LimitChangesTable(StoreBase):
    """Extensions, re-sizes and checkpoint signals (``LimitChange``), keyed (job, kind, old limit)."""

    _LIMIT_CHANGE_COLS = frozenset({"new_time_s", "new_mem_mb", "new_cpus", "step", "reason"})

    def add_limit_change(
        self,
        job_id: str,
        kind: str,
        old_time_s: int,
        new_time_s: int,
        reason: str,
        step: str,
        *,
        mem: Resize | None = None,
        cpus: Resize | None = None,
        attempt: int | None = None,
    ) -> bool:
        """Record a decided change of a live job's limit; False if this crossing already has one.

        ``mem``/``cpus``: a re-size of the memory limit or the CPUs per task (the time limit unchanged).
        """
        now = time.time()
        with self.transaction() as db:
            cur = db.conn.execute(
                """INSERT INTO limit_changes (job_id, kind, old_time_s, new_time_s, old_mem_mb, new_mem_mb,
                                              old_cpus, new_cpus, step, reason, created_at, updated_at, attempt)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id, kind, old_time_s) DO NOTHING""",
                (
                    str(job_id),
                    str(kind),
                    int(old_time_s),
                    int(new_time_s),
                    None if mem is None else mem.old,
                    None if mem is None else mem.new,
                    None if cpus is None else cpus.old,
                    None if cpus is None else cpus.new,
                    step,
                    reason,
                    now,
                    now,
                    None if attempt is None else int(attempt),
                ),
            )
            return cur.rowcount > 0

    def update_limit_change(self, job_id: str, kind: str, old_time_s: int, **cols: Any) -> bool:
        """Set columns (new_time_s, new_mem_mb, step, reason) of one change; False if absent."""
        bad = set(cols) - self._LIMIT_CHANGE_COLS
        if bad:
            raise ValueError(f"unknown limit change column(s): {', '.join(sorted(bad))}")
        if not cols:
            return False
        sets = ", ".join(f"{_q(k)} = ?" for k in cols)
        with self.transaction() as db:
            cur = db.conn.execute(
                f"UPDATE limit_changes SET {sets}, updated_at = ? WHERE job_id = ? AND kind = ? AND old_time_s = ?",
                (*cols.values(), time.time(), str(job_id), str(kind), int(old_time_s)),
            )
            return cur.rowcount > 0

    def limit_changes(self, job_id: str | None = None, *, step: str | None = None) -> list[LimitChange]:
        """Changes of one job (or of all), oldest first; optionally only those at ``step``."""
        sql, params = "SELECT * FROM limit_changes WHERE 1 = 1", []
        if job_id is not None:
            sql += " AND job_id = ?"
            params.append(str(job_id))
        if step is not None:
            sql += " AND step = ?"
            params.append(step)
        return [LimitChange(**r) for r in self._query(sql + " ORDER BY created_at, job_id, old_time_s", params)]
