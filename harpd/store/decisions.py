"""The ``decisions`` table: what harpd decided for a predict call, under the token harp-submit echoes back."""

from __future__ import annotations

import threading
import time
from typing import Any

from harpd.protocol import Decision, JobRequest
from harpd.records import IssuedDecision, Resources
from harpd.store.base import QuotaExceeded, StoreBase, _dumps, _loads

#: guards each store's per-uid bounds of unclaimed decisions (``_within_quota``)
_TALLY_LOCK = threading.Lock()
#: a user found at the quota is refused without counting again for this long
QUOTA_RECHECK_S = 5.0
#: what a decision costs the store besides its JSON: half a 4 KiB page on average (the unused end of its
#: last page), and its row's and index entries' headers. The quota is of the store's bytes, so a user at it
#: has grown the file by at most the quota (bench/unix_flood.py)
ROW_OVERHEAD = 2048 + 256


def refused_why(uid: int, count: int, stored: int, quota: tuple[int, int]) -> str:
    return (
        f"uid {uid} has {count} decisions ({stored // 1024} KiB) that no job has used yet, "
        f"the most harpd keeps per user ({quota[0]} decisions, {quota[1] // 1024} KiB: "
        "store.max_pending_decisions_per_user); they expire after a day"
    )


class DecisionsTable(StoreBase):
    """Decisions by token, claimed once by the job that registers with it."""

    def add_decision(
        self,
        token: str,
        uid: int,
        user: str | None,
        job: JobRequest,
        decided: Resources,
        decision: Decision,
        decided_at: float | None = None,
        quota: tuple[int, int] | None = None,
    ) -> None:
        """Record what harpd decided for one ``predict`` call, under a fresh ``token``.

        Not fsynced on its own (``durable=False``): it is on every submission's
        path, and the registration that claims it, a durable commit, follows
        within the same submission; a power cut between the two loses the
        registration as well, with or without this row.

        ``quota``: (decisions, bytes) one uid may have stored that no job has
        claimed yet; past it QuotaExceeded and nothing is stored, so one user
        can never make root's store grow without bound (#44: 44 MB in 1.5 s).
        ``decided``: the resources the decision gives the job (what its
        registration must show for the decision to be claimed).
        """
        # how sbatch ran the job comes with its registration, not with the question: not stored twice
        kept = job.model_dump(exclude={"argv", "sbatch_env"})
        texts = (_dumps(kept), _dumps(decided.model_dump()), _dumps(decision.model_dump()))
        size = sum(len(t or "") for t in texts) + ROW_OVERHEAD
        with self.transaction(durable=False) as db:
            if quota is not None:
                self._within_quota(db, int(uid), size, quota)
            db.conn.execute(
                """INSERT INTO decisions (token, uid, user, decided_at, job, decided, decision)
                   VALUES (?, ?, ?, ?, ?, ?, ?)""",
                (
                    str(token),
                    int(uid),
                    user,
                    time.time() if decided_at is None else float(decided_at),
                    *texts,
                ),
            )

    def _within_quota(self, db: Any, uid: int, size: int, quota: tuple[int, int]) -> None:
        """QuotaExceeded when one more decision of ``size`` bytes would put ``uid`` past ``quota``.

        Counting a user's unclaimed decisions reads all of them (megabytes at
        the quota), too slow for every predict: harpd keeps, per uid, an upper
        bound of what they hold (the last exact count plus what was stored
        since; claims and expiry only lower the truth) and counts exactly
        only when that bound would pass the quota, so a user far from it
        never pays for the count, and one at it pays once per refusal.
        """
        with _TALLY_LOCK:
            tally = self.__dict__.setdefault("_pending_tally", {})
            refused = self.__dict__.setdefault("_refused_until", {})
            if refused.get(uid, 0.0) > time.monotonic():
                # at the quota a moment ago: refused again without reading megabytes again
                count, stored = tally[uid]
                raise QuotaExceeded(refused_why(uid, count, stored, quota))
            bound = tally.get(uid)
            if bound is None or bound[0] + 1 > quota[0] or bound[1] + size > quota[1]:
                count, stored = db.conn.execute(
                    "SELECT count(*), coalesce(sum(length(job) + length(decided) + length(decision) + ?), 0) "
                    "FROM decisions WHERE uid = ? AND job_id IS NULL",
                    (ROW_OVERHEAD, uid),
                ).fetchone()
                bound = (int(count), int(stored))
                if count + 1 > quota[0] or stored + size > quota[1]:
                    tally[uid] = bound
                    refused[uid] = time.monotonic() + QUOTA_RECHECK_S
                    raise QuotaExceeded(refused_why(uid, *bound, quota))
            refused.pop(uid, None)
            tally[uid] = (bound[0] + 1, bound[1] + size)

    def get_decision(self, token: str) -> IssuedDecision | None:
        """The recorded decision of ``token`` (claimed or not); None when harpd never made it."""
        rows = self._query("SELECT * FROM decisions WHERE token = ?", [str(token)])
        if not rows:
            return None
        row = rows[0]
        return IssuedDecision.from_row({**row, **{k: _loads(row[k]) for k in ("job", "decided", "decision")}})

    def unclaimed_tokens(self, since: float) -> set[str]:
        """Tokens of decisions made at or after ``since`` that no job has claimed yet.

        Only decisions that changed something: harp-submit puts the token in
        the job's comment only then, so a dry run or an unchanged job never
        makes harpd list the queue looking for it.
        """
        rows = self._read(
            "SELECT token FROM decisions WHERE job_id IS NULL AND decided_at >= ? "
            "AND json_array_length(decision, '$.changes') > 0",
            (float(since),),
        )
        return {r[0] for r in rows}

    def drop_decisions(self, before: float) -> int:
        """Forget unclaimed decisions older than ``before`` (their job never came); returns how many."""
        with self.transaction() as db:
            cur = db.conn.execute("DELETE FROM decisions WHERE job_id IS NULL AND decided_at < ?", (float(before),))
            return int(cur.rowcount)
