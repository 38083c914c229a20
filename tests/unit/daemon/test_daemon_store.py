"""The store: schema/migrations, idempotent upserts, queries, errors, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from harpd.protocol import Decision, JobRequest, Resources
from harpd.records import JobRecord, Outcome
from harpd.store import JOB_COLUMNS, SCHEMA_VERSION, Store, StoreError
from harpd.store import migrations as store_mod


def rec(i: int, **kw) -> JobRecord:
    base = dict(
        job_id=str(i),
        source="c1",
        user=f"u{i % 3}",
        partition="cpu",
        submit_time=1000.0 + i,
        start_time=1010.0 + i,
        end_time=2000.0 + i,
        outcome=Outcome.COMPLETED,
        req_time_s=3600.0,
        req_mem_mb=4096.0,
        req_cpus=4,
        used_time_s=990.0,
        used_mem_mb=1000.5 + i,
        censored_mem=(i % 2 == 0),
    )
    base.update(kw)
    return JobRecord(**base)


# ----------------------------------------------------------------- schema


def test_new_store_has_the_design_tables_and_version(tmp_path):
    s = Store.open(tmp_path / "sub" / "dir" / "h.db")  # parent dirs created
    try:
        assert s.get_meta("schema_version") == SCHEMA_VERSION
        names = set(s.db.table_names())
        assert {"meta", "jobs", "submissions", "attempts", "models"} <= names
        assert set(JOB_COLUMNS) <= set(s.db["jobs"].columns_dict)
        assert sorted(s.db["jobs"].pks) == ["attempt", "job_id", "source"]
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        s.close()


def test_reopen_keeps_data_and_does_not_remigrate(tmp_path):
    p = tmp_path / "h.db"
    with Store.open(p) as s:
        s.insert_jobs([rec(1)])
        s.set_meta("marker", {"a": [1, 2]})
    with Store.open(p) as s:
        assert s.count_jobs() == 1
        assert s.get_meta("marker") == {"a": [1, 2]}
        assert s.get_meta("absent", 7) == 7


def test_migrations_run_in_order_from_the_stored_version(tmp_path, monkeypatch):
    p = tmp_path / "h.db"
    Store.open(p).close()
    calls = []

    def m2(db):
        calls.append("m2")
        db["extra"].create({"k": str}, pk="k")

    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS + [m2])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", len(store_mod.MIGRATIONS))
    with Store.open(p) as s:
        assert s.get_meta("schema_version") == SCHEMA_VERSION + 1 and "extra" in s.db.table_names()
    with Store.open(p) as s:
        pass
    assert calls == ["m2"]  # applied once


def test_a_failing_migration_leaves_the_old_version_intact(tmp_path, monkeypatch):
    p = tmp_path / "h.db"
    with Store.open(p) as s:
        s.insert_jobs([rec(1)])

    def bad(db):
        db["half"].create({"k": str}, pk="k")
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS + [bad])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError):
        Store.open(p)
    monkeypatch.undo()
    with Store.open(p) as s:
        assert s.get_meta("schema_version") == SCHEMA_VERSION
        assert "half" not in s.db.table_names()
        assert s.count_jobs() == 1


def test_a_newer_schema_is_refused(tmp_path):
    p = tmp_path / "h.db"
    with Store.open(p) as s:
        s.set_meta("schema_version", SCHEMA_VERSION + 5)
    with pytest.raises(StoreError, match="newer harp"):
        Store.open(p)


def test_new_jobrecord_fields_become_columns(tmp_path, monkeypatch):
    p = tmp_path / "h.db"
    with Store.open(p) as s:
        s.db.execute("ALTER TABLE jobs DROP COLUMN used_cpu_s")  # as if created before the field existed
        assert "used_cpu_s" not in s.db["jobs"].columns_dict
    with Store.open(p) as s:
        assert "used_cpu_s" in s.db["jobs"].columns_dict
        s.insert_jobs([rec(1, used_cpu_s=12.5)])
        assert s.get_job("1").used_cpu_s == 12.5


# ------------------------------------------------------------------- errors


def test_corrupt_file_is_not_a_harp_database(tmp_path):
    p = tmp_path / "h.db"
    p.write_bytes(b"this is certainly not sqlite" * 100)
    with pytest.raises(StoreError, match="not a harp database") as ei:
        Store.open(p)
    assert "\n" not in str(ei.value) and str(p) in str(ei.value)


def test_foreign_sqlite_file_is_not_a_harp_database(tmp_path):
    p = tmp_path / "other.db"
    c = sqlite3.connect(p)
    c.execute("CREATE TABLE customers(id)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not a harp database"):
        Store.open(p)
    c = sqlite3.connect(p)  # and it was not touched
    assert [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["customers"]
    c.close()


def test_parent_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="cannot create store directory"):
        Store.open(f / "h.db")


def test_directory_as_store_path(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path)


def _open_as_nobody(path: Path) -> str:
    """Store.open in a child running as nobody (root bypasses permissions); its one-line outcome."""
    code = textwrap.dedent(
        f"""
        import os, sys
        from harpd.store import Store, StoreError  # before dropping: /root is not readable by nobody
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        try:
            Store.open({str(path)!r}).close()
            print("OPENED")
        except StoreError as e:
            print("ERR", e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to nobody")


@needs_root
def test_unwritable_directory_as_a_user(short_dir):
    d = short_dir / "ro"
    d.mkdir()
    os.chmod(d, 0o755)  # root's, not writable by nobody
    msg = _open_as_nobody(d / "h.db")
    assert msg.startswith("ERR") and "not writable" in msg and str(d) in msg


@needs_root
def test_read_only_file_as_a_user(short_dir):
    os.chmod(short_dir, 0o777)
    p = short_dir / "h.db"
    Store.open(p).close()
    os.chmod(p, 0o644)
    msg = _open_as_nobody(p)
    assert msg.startswith("ERR") and "read-only" in msg and str(p) in msg


def test_disk_full_is_a_one_line_error_and_loses_nothing(tmp_path):
    p = tmp_path / "h.db"
    s = Store.open(p)
    s.insert_jobs([rec(i) for i in range(100)])
    pages = s.db.execute("PRAGMA page_count").fetchone()[0]
    s.db.execute(f"PRAGMA max_page_count={pages + 2}")  # SQLite's own "disk full"
    with pytest.raises(StoreError, match="disk full") as ei:
        s.insert_jobs([rec(i, job_name="x" * 500) for i in range(1000, 3000)])
    assert "\n" not in str(ei.value)
    assert s.count_jobs() == 100  # the failed batch rolled back entirely
    s.close()
    with Store.open(p) as s2:
        assert s2.count_jobs() == 100
        s2.insert_jobs([rec(5000)])
        assert s2.count_jobs() == 101


def test_closed_store_refuses(tmp_path):
    s = Store.open(tmp_path / "h.db")
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.count_jobs()


# --------------------------------------------------------------------- jobs


def test_insert_and_read_back_every_field(store):
    r = rec(
        7,
        account="acct",
        group="grp",
        job_name="n",
        signature="sig",
        state="COMPLETED",
        exit_code=0,
        exit_signal=9,
        req_nodes=2,
        req_gpus=1,
        alloc_cpus=8,
        alloc_nodes=2,
        alloc_gpus=1,
        used_cpu_s=3.5,
        array_size=4,
        censored_time=True,
        harp_sized=True,
        attempt=2,
        outcome=Outcome.TIMEOUT,
    )
    assert store.insert_jobs([r]) == 1
    got = store.get_job("7")
    assert got == r
    assert isinstance(got.outcome, Outcome) and got.censored_time is True


def test_upsert_is_idempotent_and_latest_wins(store):
    records = [rec(i) for i in range(50)]
    assert store.insert_jobs(records) == 50
    assert store.insert_jobs(records) == 50
    assert store.count_jobs() == 50
    store.insert_jobs([rec(3, outcome=Outcome.OOM, used_mem_mb=9.0)])
    assert store.count_jobs() == 50
    assert store.get_job("3").outcome is Outcome.OOM and store.get_job("3").used_mem_mb == 9.0


def test_primary_key_is_source_job_attempt(store):
    store.insert_jobs([rec(1), rec(1, source="trace"), rec(1, attempt=2)])
    assert store.count_jobs() == 3
    assert store.get_job("1").attempt == 2  # latest attempt
    assert store.get_job("1", source="trace").source == "trace"
    assert store.get_job("nope") is None


def test_batches_smaller_than_input(store):
    assert store.insert_jobs((rec(i) for i in range(1001)), batch_size=100) == 1001
    assert store.count_jobs() == 1001


def test_dicts_are_accepted(store):
    store.insert_jobs([rec(1).to_dict()])
    assert store.get_job("1") == rec(1)


def test_iter_jobs_filters_and_order(store):
    store.insert_jobs([rec(i, submit_time=100.0 - i) for i in range(10)])
    store.insert_jobs([rec(99, outcome=Outcome.RUNNING), rec(98, source="other")])
    ids = [r.job_id for r in store.iter_jobs(source="c1")]
    assert ids == [str(i) for i in range(9, -1, -1)]  # by submit_time ascending; running excluded
    assert "99" in [r.job_id for r in store.iter_jobs(finished_only=False)]
    assert [r.job_id for r in store.iter_jobs(source="c1", since=95.0, until=98.0)] == [
        "5",
        "4",
        "3",
    ]  # since inclusive, until exclusive
    assert {r.user for r in store.iter_jobs(user="u1")} == {"u1"}
    assert store.count_jobs(user="u1", source="c1") == len(list(store.iter_jobs(user="u1", source="c1")))
    assert store.count_jobs(finished_only=False) == 12
    assert [r.job_id for r in store.iter_jobs(order="job_id", source="c1")][:2] == ["0", "1"]
    with pytest.raises(ValueError):
        list(store.iter_jobs(order="submit_time; DROP TABLE jobs"))


def test_job_columns_types_and_nulls(store):
    store.insert_jobs([rec(1), rec(2, used_mem_mb=None, user=None, req_cpus=None)])
    cols = store.job_columns(["used_mem_mb", "user", "censored_mem", "req_cpus", "outcome"], order="job_id")
    assert cols["used_mem_mb"].dtype == np.float64
    assert cols["used_mem_mb"][0] == pytest.approx(1001.5) and np.isnan(cols["used_mem_mb"][1])
    assert cols["req_cpus"].dtype == np.float64 and np.isnan(cols["req_cpus"][1])
    assert list(cols["user"]) == ["u1", None]
    assert cols["censored_mem"].dtype == bool and list(cols["censored_mem"]) == [False, True]
    assert list(cols["outcome"]) == ["completed", "completed"]
    only = store.job_columns(["job_id"], "used_mem_mb > ?", (0,))
    assert list(only["job_id"]) == ["1"]
    empty = store.job_columns(["used_mem_mb", "user"], "1 = 0")
    assert empty["used_mem_mb"].shape == (0,) and empty["used_mem_mb"].dtype == np.float64
    with pytest.raises(ValueError):
        store.job_columns(["nope"])


def test_job_columns_read_in_slices_match_one_read(store, monkeypatch):
    import harpd.store.jobs as store_module

    store.insert_jobs(
        [
            rec(i, used_mem_mb=None if i % 4 == 0 else 100.0 + i, user=None if i % 5 == 0 else f"u{i % 3}")
            for i in range(23)
        ]
    )
    names = ["job_id", "used_mem_mb", "user", "censored_mem", "outcome"]
    whole = store.job_columns(names, order="job_id")
    monkeypatch.setattr(store_module, "_COLUMN_SLICE", 4)  # 23 rows: six slices, the last one short
    sliced = store.job_columns(names, order="job_id")
    for c in names:
        assert sliced[c].dtype == whole[c].dtype and len(sliced[c]) == 23
        np.testing.assert_array_equal(sliced[c], whole[c])
    assert list(sliced["job_id"]) == sorted(str(i) for i in range(23))


# ------------------------------------------------------- submissions etc.


def test_submissions_lifecycle(store):
    store.add_submission(
        "10",
        1000,
        "alice",
        {"partition": "cpu"},
        Resources(time_s=60),
        Resources(time_s=120),
        Decision(),
    )
    store.add_submission("11", 1001, "bob", {}, Resources(), Resources(), None, chain_id="11")
    sub = store.get_submission("10")
    assert sub.uid == 1000 and sub.job == {"partition": "cpu"} and sub.state == "pending"
    assert [s.job_id for s in store.pending_submissions()] == ["10", "11"]
    first_time = sub.submitted_at
    store.add_submission("10", 1000, "alice", {"partition": "gpu"}, Resources(), Resources(), None)  # client retry
    again = store.get_submission("10")
    assert again.submitted_at == first_time and again.job == {"partition": "gpu"}
    assert store.mark_submission_done("10", "timeout") is True
    assert store.mark_submission_done("404", "timeout") is False
    assert store.get_submission("10").state == "done" and store.get_submission("10").outcome == "timeout"
    assert [s.job_id for s in store.pending_submissions()] == ["11"]
    assert store.get_submission("404") is None


def test_attempts_exactly_once(store):
    assert store.add_attempt("100", 1, "100", {"time_s": 60}, "first", "submitted") is True
    assert store.add_attempt("100", 2, None, {"time_s": 120}, "timeout: doubled", "decided") is True
    assert store.add_attempt("100", 2, None, {"time_s": 999}, "race", "decided") is False
    assert store.update_attempt("100", 2, job_id="101", step="submitted") is True
    assert store.update_attempt("100", 9, step="done") is False
    with pytest.raises(ValueError):
        store.update_attempt("100", 2, created_at=0)
    a = store.attempts("100")
    assert [x.attempt for x in a] == [1, 2]
    assert a[1].limits == {"time_s": 120} and a[1].job_id == "101" and a[1].step == "submitted"
    assert store.chain_of("101") == "100" and store.chain_of("100") == "100"
    assert store.chain_of("555") is None


def test_concurrent_add_attempt_has_one_winner(tmp_path):
    p = tmp_path / "h.db"
    s = Store.open(p)
    wins = []
    barrier = threading.Barrier(8)

    def go(i):
        barrier.wait()
        wins.append(s.add_attempt("c", 2, str(i), {}, "r", "decided"))

    ts = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(wins) == [False] * 7 + [True]
    s.close()


def test_models_and_single_champion(store):
    a = store.save_model("gbm", "time", 100, {"coverage": 0.95}, "/m/a.pkl", champion=True)
    b = store.save_model("knn", "time", 100, {"coverage": 0.9}, "/m/b.pkl", champion=False)
    c = store.save_model("gbm2", "time", 120, {"coverage": 0.96}, "/m/c.pkl", champion=True)
    store.save_model("gbm", "mem", 100, {}, "/m/d.pkl", champion=True)
    assert len({a, b, c}) == 3
    champ = store.champion("time")
    assert champ is not None and champ.name == "gbm2" and champ.score == {"coverage": 0.96} and champ.id == c
    assert champ.path == "/m/c.pkl" and champ.n_train == 120
    assert store.champion("mem").name == "gbm"
    assert store.champion("cpus") is None
    champs = [m for m in store.models() if m.champion]
    assert sorted(m.resource for m in champs) == ["mem", "time"]


def test_transaction_rolls_back_everything(store):
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.insert_jobs([rec(1)])
            store.set_meta("k", 1)
            with store.transaction():
                store.add_submission("5", 1, "u", {}, Resources(), Resources(), None)
            raise RuntimeError("boom")
    assert store.count_jobs() == 0 and store.get_meta("k") is None and store.get_submission("5") is None


def test_nested_transaction_failure_keeps_outer(store):
    with store.transaction():
        store.set_meta("outer", 1)
        with pytest.raises(KeyError):
            with store.transaction():
                store.set_meta("inner", 1)
                raise KeyError("x")
    assert store.get_meta("outer") == 1 and store.get_meta("inner") is None


def test_a_decision_commit_skips_its_fsync_and_every_other_commit_keeps_it(store):
    """A predict's decision commits with synchronous=NORMAL, every other commit with FULL, whatever came before."""

    def mode(db):
        return db.conn.execute("PRAGMA synchronous").fetchone()[0]

    seen = []
    with store.transaction(durable=False) as db:
        seen.append(mode(db))
        with store.transaction() as inner:  # a nested level follows the outermost
            seen.append(mode(inner))
    with store.transaction(durable=False) as db:  # the next decision
        seen.append(mode(db))
    with store.transaction() as db:
        seen.append(mode(db))
    with store.transaction() as db:
        seen.append(mode(db))
    assert seen == [1, 1, 1, 2, 2]  # NORMAL x3, then FULL
    with pytest.raises(RuntimeError):
        with store.transaction(durable=False):
            raise RuntimeError("boom")
    with store.transaction() as db:  # after a failed decision too
        assert mode(db) == 2
    store.add_decision("t1", 1000, "u", JobRequest.model_validate({"request": {}}), Resources(), Decision())
    assert store.get_decision("t1") is not None
    with store.transaction() as db:
        assert mode(db) == 2


def test_a_run_of_decisions_sets_the_sync_mode_once(store):
    """Each decision after the first is three statements (BEGIN, INSERT, COMMIT): no PRAGMA each time."""
    store.add_decision("t0", 1000, "u", JobRequest.model_validate({"request": {}}), Resources(), Decision())
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    try:
        for k in range(1, 4):
            store.add_decision(f"t{k}", 1000, "u", JobRequest.model_validate({"request": {}}), Resources(), Decision())
        store.set_meta("k", 1)  # a durable commit puts FULL back first
    finally:
        store.db.conn.set_trace_callback(None)
    words = [st.split()[0].upper() for st in statements]
    assert words[:9] == ["BEGIN", "INSERT", "COMMIT"] * 3
    assert "PRAGMA synchronous=FULL" in statements[9:] and statements.index("PRAGMA synchronous=FULL") < words.index(
        "COMMIT", 9
    )


def test_threads_read_while_another_writes(tmp_path):
    s = Store.open(tmp_path / "h.db")
    s.insert_jobs([rec(i) for i in range(1000)])
    errors = []

    def writer():
        try:
            for k in range(20):
                s.insert_jobs([rec(10000 + k * 100 + j) for j in range(100)])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            for _ in range(20):
                n = s.count_jobs()
                assert 1000 <= n <= 3000
                assert len(list(s.iter_jobs(limit=50))) == 50
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert s.count_jobs() == 3000
    s.close()


def test_two_processes_share_the_file(tmp_path):
    p = tmp_path / "h.db"
    s = Store.open(p)
    code = textwrap.dedent(
        f"""
        from harpd.store import Store
        from harpd.records import JobRecord
        s = Store.open({str(p)!r})
        s.insert_jobs(JobRecord(job_id=str(i), source="p2", outcome="completed") for i in range(2000))
        s.close()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    s.insert_jobs([rec(i) for i in range(2000)])
    assert proc.wait(60) == 0
    assert s.count_jobs() == 4000
    s.close()


# ------------------------------------------------------------ crash safety

_CHILD = """
import os, sys, time
from harpd.store import Store
from harpd.records import JobRecord
s = Store.open(sys.argv[1])
n = 0
for b in range(int(sys.argv[2])):
    s.insert_jobs(JobRecord(job_id=str(n + i), outcome="completed", submit_time=float(n + i)) for i in range(500))
    n += 500
    print("committed", n, flush=True)
with s.transaction():
    s.insert_jobs(JobRecord(job_id=str(10**6 + i), outcome="completed") for i in range(5000))
    s.add_submission("999", 1, "u", {}, {}, {}, None)
    print("in-transaction", flush=True)
    time.sleep(600)
"""

_LOOP_CHILD = """
import sys
from harpd.store import Store
from harpd.records import JobRecord
s = Store.open(sys.argv[1])
n = 0
while True:
    s.insert_jobs(JobRecord(job_id=str(n + i), outcome="completed") for i in range(1000))
    n += 1000
    print(n, flush=True)
"""


def _assert_healthy(path: Path) -> Store:
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.close()
    return Store.open(path)


def test_sigkill_mid_transaction_loses_nothing_committed(tmp_path):
    p = tmp_path / "h.db"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(p), "6"], stdout=subprocess.PIPE, text=True)
    committed = 0
    for line in proc.stdout:
        if line.startswith("committed"):
            committed = int(line.split()[1])
        if line.startswith("in-transaction"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert committed == 3000
    s = _assert_healthy(p)
    try:
        assert s.count_jobs() == committed  # all committed batches, none of the open transaction
        assert s.get_submission("999") is None
        s.insert_jobs([rec(1)])  # still writable
        assert s.count_jobs() == committed + 1
    finally:
        s.close()


def test_sigkill_at_a_random_point_keeps_whole_batches(tmp_path):
    p = tmp_path / "h.db"
    proc = subprocess.Popen([sys.executable, "-c", _LOOP_CHILD, str(p)], stdout=subprocess.PIPE, text=True)
    last = 0
    for line in proc.stdout:
        last = int(line)
        if last >= 5000:
            break
    proc.send_signal(signal.SIGKILL)  # most likely inside the next batch
    proc.wait(30)
    s = _assert_healthy(p)
    try:
        n = s.count_jobs()
        assert n >= last and n % 1000 == 0  # every reported commit kept, batches atomic
    finally:
        s.close()


def test_connections_of_finished_threads_are_closed(tmp_path):
    import gc

    s = Store.open(tmp_path / "h.db")
    s.insert_jobs([rec(1)])
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(100):  # like harpd: one short thread per client
        t = threading.Thread(target=s.count_jobs)
        t.start()
        t.join()
    gc.collect()
    assert s.open_connections == 1  # only this thread's
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 3
    s.close()
    assert s.open_connections == 0


@needs_root
def test_a_thread_that_met_the_store_read_only_writes_again_once_it_is_fixed(short_dir):
    """SQLite opens an unwritable file read-only for good: after the admin's fix, harpd writes without a restart."""
    os.chmod(short_dir, 0o777)
    p = short_dir / "h.db"
    code = textwrap.dedent(
        f"""
        import os, threading
        from harpd.store import Store, StoreError
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        s = Store.open({str(p)!r})
        out = []

        def worker():  # a request thread whose first use of the store falls in the read-only spell
            try:
                s.set_meta("k", 1)
                out.append("WROTE-WHILE-RO")
            except StoreError as e:
                out.append("REFUSED " + str(e))
            fixed.wait(60)
            try:
                s.set_meta("k", 2)
                out.append("WROTE")
            except StoreError as e:
                out.append("STILL " + str(e))

        fixed = threading.Event()
        os.chmod({str(p)!r}, 0o444)
        t = threading.Thread(target=worker)
        t.start()
        while not out:
            t.join(0.05)
        os.chmod({str(p)!r}, 0o644)
        fixed.set()
        t.join(60)
        print("|".join(out), s.get_meta("k"))
        s.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().split("|")
    assert first.startswith("REFUSED") and "read-only" in first
    assert second == "WROTE 2", out.stdout
