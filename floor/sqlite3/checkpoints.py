"""Checkpoints of the embedded mode's SQLite file, in a thread of their own rather than in the requests' commits.

In WAL mode a commit appends the pages it changed to the write-ahead log, and SQLite copies them back into the
database file (a checkpoint) once the log holds wal_autocheckpoint pages (1,000 by default), in the commit that
crossed the line. A promise.create changes about 15 pages, so at 2,000 creates a second that commit came 30 times a
second, and each held the event loop's thread for about 4 ms: the embedded mode's p99 at 1 client, and 12% of its
time at 16 (bench/HISTORY.md, 2026-12-05).

Here a thread checkpoints every CHECKPOINT_EVERY_S, PASSIVE: it copies what it can without waiting for writers or
readers, with the interpreter released, while requests go on committing. The log starts again from its beginning
only when a checkpoint has copied all of it, which a checkpoint running beside writers rarely does; so once the log
holds RESTART_FRAMES, the thread copies what is left while it holds the process's writer lock (floor/sqlite3/base.py,
a few pages), and the next commit starts the log afresh. Connections of a process running this thread checkpoint by
themselves only past BACKSTOP_FRAMES, should the thread fall behind or stop.
"""

import logging
import threading

from django.db import connection

from floor.loops import keep_running
from floor.sqlite3 import base

log = logging.getLogger(__name__)

CHECKPOINT_EVERY_S = 0.1
RESTART_FRAMES = 4_000  # about 16 MB of log
BACKSTOP_FRAMES = 20_000


def checkpoint_once():
    """One PASSIVE checkpoint, and the log's rest under the writer lock once it is long; (frames copied, wait)."""
    connection.ensure_connection()
    raw = connection.connection
    _, logged, copied = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if logged >= RESTART_FRAMES:
        with base.writing():
            _, logged, copied = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return max(copied, 0), CHECKPOINT_EVERY_S


def checkpoint_in_background(stopping):
    """Start the checkpointing thread of this process (serve, in the embedded mode on SQLite)."""
    base.autocheckpoint_frames = BACKSTOP_FRAMES  # connections opened from now on leave checkpoints to the thread

    def checkpointing():
        keep_running(checkpoint_once, float("inf"), stopping, retry_after=1.0)

    thread = threading.Thread(target=checkpointing, name="resonate-checkpoints", daemon=True)
    thread.start()
    return thread
