"""The ``models`` table: every model trained, and which one is each resource's champion."""

from __future__ import annotations

import time
from typing import Any

from harpd.records import ModelRow
from harpd.store.base import StoreBase, _dumps, _loads


class ModelsTable(StoreBase):
    """Trained models; saving a champion demotes the previous one in the same transaction."""

    def save_model(
        self,
        name: str,
        resource: str,
        n_train: int,
        score: dict[str, Any],
        path: str,
        champion: bool,
    ) -> int:
        """Record a trained model; returns its id.

        Saving a champion demotes the previous champion of the same resource
        in the same transaction, so there is never zero or two champions.
        """
        with self.transaction() as db:
            if champion:
                db.conn.execute("UPDATE models SET champion = 0 WHERE resource = ? AND champion = 1", (resource,))
            cur = db.conn.execute(
                "INSERT INTO models (name, resource, trained_at, n_train, score, champion, path)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, resource, time.time(), int(n_train), _dumps(score), 1 if champion else 0, str(path)),
            )
            assert cur.lastrowid is not None  # an INSERT always sets it
            return int(cur.lastrowid)

    @staticmethod
    def _model(row: dict[str, Any]) -> ModelRow:
        score = _loads(row["score"])
        return ModelRow(
            id=int(row["id"]),
            name=str(row["name"]),
            resource=str(row["resource"]),
            trained_at=float(row["trained_at"]),
            n_train=row["n_train"],
            score=score if isinstance(score, dict) else {},
            champion=bool(row["champion"]),
            path=str(row["path"] or ""),
        )

    def models(self) -> list[ModelRow]:
        """Every model ever saved, oldest first."""
        return [self._model(r) for r in self._query("SELECT * FROM models ORDER BY trained_at, id")]

    def champion(self, resource: str) -> ModelRow | None:
        """The resource's champion (the newest, were there ever two), or None before any training."""
        rows = self._query(
            "SELECT * FROM models WHERE resource = ? AND champion = 1 ORDER BY trained_at DESC, id DESC LIMIT 1",
            [resource],
        )
        return self._model(rows[0]) if rows else None
