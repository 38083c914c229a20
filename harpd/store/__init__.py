"""harp's SQLite store: the only package that opens the database.

One package owns SQL so the schema, its migrations and its durability rules
live in one place; everything else speaks ``JobRecord`` and the frozen records
of ``harpd.records`` (``Submission``, ``AttemptRecord``, ``LimitChange``).
It is split by table: ``base`` (the connection, transactions, meta, health),
``columns`` and ``migrations`` (the schema), then one module per table, each a
mixin of queries over ``base``; ``Store`` is all of them.  The import-linter
rule "only harpd.store opens SQLite" names the package.

Schema: ``meta.schema_version`` counts the entries of ``migrations.MIGRATIONS``
applied; ``Store.open`` applies the missing ones in one transaction, so a crash
during a migration leaves the previous version intact.  ``jobs`` mirrors
``JobRecord``: a field added to the dataclass becomes a nullable column at the
next open without a hand-written migration.
"""

from __future__ import annotations

import sqlite3

from harpd.records import Outcome
from harpd.store.attempts import AttemptsTable
from harpd.store.base import OwnerChanged, QuotaExceeded, StoreError
from harpd.store.columns import JOB_COLUMNS, LIVE_SOURCES_KEY
from harpd.store.decisions import DecisionsTable
from harpd.store.jobs import JobsTable
from harpd.store.limit_changes import LimitChangesTable, Resize
from harpd.store.migrations import MIGRATIONS, SCHEMA_VERSION
from harpd.store.submissions import SubmissionsTable
from harpd.store.trained_models import ModelsTable
from harpd.store.trials import TrialsTable

# Bind Outcome as its plain string value: sqlite3's generic str-subclass path
# costs microseconds per row, which is most of a million-row import.
sqlite3.register_adapter(Outcome, lambda o: o._value_)

__all__ = [
    "Resize",
    "Store",
    "StoreError",
    "OwnerChanged",
    "QuotaExceeded",
    "JOB_COLUMNS",
    "SCHEMA_VERSION",
    "MIGRATIONS",
    "LIVE_SOURCES_KEY",
]


class Store(JobsTable, SubmissionsTable, DecisionsTable, AttemptsTable, LimitChangesTable, TrialsTable, ModelsTable):
    """The harp database.  Use ``Store.open(path)``; thread-safe."""
