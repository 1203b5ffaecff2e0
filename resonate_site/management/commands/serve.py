"""manage.py serve: run the server (POST /, /poll, /health, /admin) under uvicorn.

In the embedded mode (the default, RESONATE_BACKGROUND=embedded) the same process also sweeps
timeouts and delivers messages, in two threads. In production mode Celery workers and Beat do that.
"""

import errno
import os
import socket
import threading
import time

import uvicorn
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from uvicorn.config import STARTUP_FAILURE

from floor.conf import resonate_settings
from floor.counters import multiprocess_dir
from floor.sqlite3.checkpoints import checkpoint_in_background
from outbox.dispatch import Deliverer
from resonate_site.auth import check_auth, refuse_unprotected
from resonate_site.metrics import clear_if_unused
from resonate_site.serving import PARENT, RollingRestarts
from timeouts.sweeper import keep_sweeping

PORT_WAIT_S = 15  # how long a new serve waits for its port, held by the processes of one killed before it
GRACE_S = 5  # on SIGTERM, requests get this long to finish; open SSE streams are then closed (clients reconnect)


class Command(BaseCommand):
    help = "Run the Resonate server (embedded default: 127.0.0.1:8001, one process that also sweeps and delivers)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--workers", type=int, default=1, help="server processes (RESONATE_BACKGROUND=celery)")
        parser.add_argument("--log-level", default="info")
        parser.add_argument(
            "--check", action="store_true", help="check the configuration as a start would, then exit (bin/production)"
        )

    def handle(self, *args, host, port, workers, log_level, check, **options):
        embedded = resonate_settings.BACKGROUND == "embedded"
        if embedded and workers > 1:
            raise CommandError("several server processes need RESONATE_BACKGROUND=celery (and a Redis hub)")
        try:
            refuse_unprotected(host)
        except ImproperlyConfigured as error:
            raise CommandError(str(error)) from error
        if refused := check_auth(None):  # a key file that cannot be read
            raise CommandError(refused[0].msg)
        if check:
            self.stdout.write(f"serve: the configuration holds ({'embedded' if embedded else 'production'} mode)")
            return
        if multiprocess_dir():
            clear_if_unused(multiprocess_dir())
        elif workers > 1:
            self.stderr.write("without RESONATE_METRICS_DIR, /metrics counts only the server process that answers it")
        stop = threading.Event()
        if embedded:
            if connection.vendor == "sqlite":
                checkpoint_in_background(stop.is_set)
            threading.Thread(
                target=keep_sweeping, args=(float("inf"), stop.is_set), name="resonate-sweeper", daemon=True
            ).start()
            Deliverer(stop.is_set).start()
        if not self.wait_for_the_port(host, port):
            raise CommandError(f"port {port} of {host} is in use")
        mode = "embedded: sweeping and delivering in this process" if embedded else "timeouts and delivery by Celery"
        self.stdout.write(f"Resonate server on http://{host}:{port}/ ({mode})")
        if workers > 1:
            os.environ[PARENT] = str(os.getpid())  # the worker processes exit if this one dies
        try:
            config = uvicorn.Config(
                "resonate_site.asgi:application",
                host=host,
                port=port,
                workers=workers,
                log_level=log_level,
                log_config=None,  # uvicorn's lines go through Django's LOGGING (RESONATE_LOG_FORMAT)
                access_log=False,
                lifespan="on",  # resonate_site.asgi connects to the hub at startup
                timeout_graceful_shutdown=GRACE_S,
                http="resonate_site.serving:GuardedHttpProtocol",
                limit_concurrency=resonate_settings.MAX_CONNECTIONS,
            )
            if workers > 1:  # as uvicorn.run does, with the supervisor of rolling restarts and a socket per process
                try:
                    supervisor = RollingRestarts(config)
                except OSError as error:
                    raise CommandError(f"cannot listen on {host}:{port}: {error}") from error
                supervisor.run()
            else:
                config.load_app()
                server = uvicorn.Server(config)
                server.run()
                if not server.started:
                    raise SystemExit(STARTUP_FAILURE)
        finally:
            stop.set()

    def wait_for_the_port(self, host, port, timeout_s=PORT_WAIT_S):
        """Whether the port is free, waiting for it: a serve killed with SIGKILL leaves its server processes holding
        the port until they notice (within 1 s) and finish their requests (within GRACE_S), and its successor, started
        at once by the supervisor, waits for them rather than fail to bind and be started again. False when it is
        still in use after `timeout_s`: the server processes' sockets (SO_REUSEPORT) would bind it beside whatever
        holds it, another serve of this user among them, and share its clients."""
        deadline, said = time.monotonic() + timeout_s, False
        while True:
            try:
                socket.create_server((host, port)).close()  # bound as uvicorn binds (SO_REUSEADDR), then let go
                return True
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    return True  # the bind of the server's own socket says what is wrong
                if time.monotonic() > deadline:
                    return False
                if not said:
                    self.stderr.write(f"port {port} is still held (a previous server's processes?); waiting for it")
                    said = True
                time.sleep(0.1)
