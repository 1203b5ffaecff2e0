"""SQLite: the writers of one process take turns on a lock of the process (floor/sqlite3/base.py), held from BEGIN to
COMMIT or ROLLBACK, so that none waits in SQLite's sleeping busy handler."""

import threading
import time

import pytest
from django.db import OperationalError, connection, transaction

from floor.sqlite3 import base as sqlite_backend
from promises.models import Promise

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


def create(id):
    Promise.objects.create(id=id, state="pending", timeout_at=1, created_at=0)


def test_the_lock_is_held_from_begin_to_commit_and_is_free_when_the_commit_s_hooks_run():
    held_in_hook = []
    with transaction.atomic():
        assert sqlite_backend._writer.locked() and connection.holds_writer
        create("a")
        transaction.on_commit(lambda: held_in_hook.append(sqlite_backend._writer.locked()))
    assert held_in_hook == [False]
    assert not sqlite_backend._writer.locked() and not connection.holds_writer


def test_a_rollback_frees_the_lock():
    with pytest.raises(RuntimeError), transaction.atomic():
        create("b")
        raise RuntimeError("the operation failed")
    assert not sqlite_backend._writer.locked()
    assert not Promise.objects.filter(id="b").exists()


def test_a_savepoint_takes_no_second_turn():
    with transaction.atomic(), transaction.atomic():  # would wait on itself for WRITER_WAIT_S if it did
        create("c")
    assert Promise.objects.filter(id="c").exists()


def test_a_begin_that_fails_frees_the_lock(monkeypatch):
    def refuse(self, *args):
        raise OperationalError("disk I/O error")

    connection.ensure_connection()
    monkeypatch.setattr(sqlite_backend.DatabaseWrapper, "_begin", refuse)
    with pytest.raises(OperationalError), transaction.atomic():
        pass
    assert not sqlite_backend._writer.locked()


def test_a_closed_connection_frees_the_lock():
    """A thread's connection dropped mid-transaction (a worker thread ending): the lock does not stay taken."""
    seen = []

    def drop_mid_transaction():
        transaction.atomic().__enter__()
        seen.append(sqlite_backend._writer.locked())
        connection.close()

    thread = threading.Thread(target=drop_mid_transaction)
    thread.start()
    thread.join(10)
    assert seen == [True] and not sqlite_backend._writer.locked()


def test_a_writer_of_another_thread_goes_as_soon_as_the_first_commits_not_after_a_busy_sleep():
    """SQLite's busy handler sleeps 1, 2, 5, … 100 ms between looks, and a writer that came second waited up to that
    long after the lock was free. Queued on the process's lock, it goes at once."""
    committed, begun = [], []
    first_in = threading.Event()

    def second():
        first_in.wait()
        with transaction.atomic():
            begun.append(time.monotonic())
            create("second")
        connection.close()

    thread = threading.Thread(target=second)
    thread.start()
    with transaction.atomic():
        create("first")
        first_in.set()
        time.sleep(0.3)  # the second thread waits for the lock meanwhile
    committed.append(time.monotonic())
    thread.join(10)
    assert Promise.objects.filter(id__in=["first", "second"]).count() == 2
    assert begun[0] - committed[0] < 0.02


def test_a_writer_that_gets_no_turn_within_its_wait_is_told_the_database_is_locked(monkeypatch):
    """What SQLite's own busy timeout raises: handled as a lost race, retried, then a 503 (floor.transactions)."""
    from floor.transactions import lost_race

    monkeypatch.setattr(sqlite_backend, "WRITER_WAIT_S", 0.05)
    failed = []
    release, holding = threading.Event(), threading.Event()

    def hold():
        with transaction.atomic():
            holding.set()
            release.wait(5)
        connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(5)
    try:
        with pytest.raises(OperationalError) as error, transaction.atomic():
            pass
        failed.append(error.value)
    finally:
        release.set()
        thread.join(10)
    assert lost_race(failed[0])


# Checkpoints in a thread of their own (floor/sqlite3/checkpoints.py)


def wal_frames():
    """(frames in the log, frames copied into the database file), without copying any."""
    _, logged, copied = connection.connection.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()
    return logged, copied


def test_a_checkpoint_copies_the_log_and_the_next_commit_starts_it_again_from_its_beginning():
    from floor.sqlite3 import checkpoints

    connection.ensure_connection()
    for n in range(20):
        with transaction.atomic():
            create(f"w{n}")
    logged, _ = wal_frames()
    assert logged >= 20
    copied, wait = checkpoints.checkpoint_once()
    assert copied == logged and wait == checkpoints.CHECKPOINT_EVERY_S
    with transaction.atomic():
        create("afresh")
    assert wal_frames()[0] < logged  # written from the log's beginning: it does not grow


def test_a_long_log_is_finished_in_a_turn_of_the_writer_lock(monkeypatch):
    from floor.sqlite3 import checkpoints

    monkeypatch.setattr(checkpoints, "RESTART_FRAMES", 0)

    connection.ensure_connection()
    done = []
    with transaction.atomic():
        create("held")
        thread = threading.Thread(target=lambda: done.append(checkpoints.checkpoint_once()))
        thread.start()
        time.sleep(0.2)
        assert done == []  # a long log's rest is copied in a turn of its own: after this transaction's
    thread.join(5)
    assert len(done) == 1


def test_a_process_that_checkpoints_in_a_thread_leaves_only_a_long_log_to_its_commits(monkeypatch):
    from floor.sqlite3 import checkpoints

    stop = threading.Event()
    monkeypatch.setattr(sqlite_backend, "autocheckpoint_frames", None)
    thread = checkpoints.checkpoint_in_background(stop.is_set)
    try:
        assert sqlite_backend.autocheckpoint_frames == checkpoints.BACKSTOP_FRAMES
        connection.close()
        connection.ensure_connection()  # opened from now on: checkpoints only past the backstop
        assert connection.connection.execute("PRAGMA wal_autocheckpoint").fetchone() == (checkpoints.BACKSTOP_FRAMES,)
        with transaction.atomic():
            create("background")
        deadline = time.monotonic() + 5
        while wal_frames()[1] < wal_frames()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert wal_frames()[1] == wal_frames()[0]  # the thread copied it
    finally:
        stop.set()
        thread.join(5)
        connection.close()  # the next test's connection checkpoints by itself again
    assert not thread.is_alive()
