"""Failures that are the world's, not the code's: the database or Redis out of reach for a while.

Background work (the sweeper, the deliverer, Celery's wake-ups) meets them whenever PostgreSQL restarts, a proxy cuts
its connections or Redis goes away, and it goes on once they are back: such a failure is logged as one WARNING line
naming what was out of reach. Anything else is a bug, logged with its traceback, so that a traceback in a log always
means something to fix (the fault suite, the live tests and the SDK tests fail on one).
"""

import logging
import sys
from functools import cache


def is_outage(error):
    """Whether `error` says that something the server depends on is out of reach, rather than that the code is wrong."""
    return isinstance(error, _outage_classes())


@cache
def _outage_classes():
    from django.db import InterfaceError, OperationalError

    classes = [OperationalError, InterfaceError, ConnectionError, TimeoutError]
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        classes += [RedisConnectionError, RedisTimeoutError]
    except ImportError:  # the embedded server needs no Redis client
        pass
    try:
        from kombu.exceptions import OperationalError as BrokerUnreachable

        classes.append(BrokerUnreachable)
    except ImportError:
        pass
    return tuple(classes)


def log_failure(log, message, *args, level=logging.WARNING):
    """Log the exception being handled: one line at `level` if it is an outage, else with its traceback (ERROR)."""
    error = sys.exc_info()[1]
    if is_outage(error):
        log.log(level, f"{message} (out of reach: %s: %s)", *args, type(error).__name__, one_line(error))
    else:
        log.exception(message, *args)


def one_line(error):
    return " ".join(str(error).split())[:500]
