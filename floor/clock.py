"""The server's clock: wall-clock milliseconds that never go backwards within a process."""

import threading
import time

_lock = threading.Lock()
_last = 0


def now_ms():
    global _last
    with _lock:
        _last = max(_last, time.time_ns() // 1_000_000)
        return _last
