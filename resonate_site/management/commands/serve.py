"""manage.py serve: run the server (POST /, /poll, /health, /admin) under uvicorn."""

import uvicorn
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run the Resonate server (embedded default: 127.0.0.1:8001, one process)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)
        parser.add_argument("--workers", type=int, default=1, help="server processes (use 1 with SQLite)")
        parser.add_argument("--log-level", default="info")

    def handle(self, *args, host, port, workers, log_level, **options):
        self.stdout.write(f"Resonate server on http://{host}:{port}/")
        uvicorn.run(
            "resonate_site.asgi:application", host=host, port=port, workers=workers,
            log_level=log_level, access_log=False, lifespan="off",
        )
