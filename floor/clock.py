"""The server's clock: wall-clock milliseconds that never go backwards within a process."""

import threading
import time
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_lock = threading.Lock()
_last = 0


def now_ms():
    global _last
    with _lock:
        _last = max(_last, time.time_ns() // 1_000_000)
        return _last


def utc_datetime(ms):
    """A millisecond timestamp as an aware datetime in UTC; None when it is beyond what a datetime holds."""
    try:
        return EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return None
