"""Django settings for the Resonate server. Environment variables override every default here."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from floor import redis_urls
from floor.conf import beat_seconds, from_environment

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "insecure-dev-key-change-me-in-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "").lower() in {"1", "true", "yes"}
# Loopback by default, so a web page cannot reach the embedded server through DNS rebinding; production
# names its hosts (DJANGO_ALLOWED_HOSTS=resonate.example.com,10.0.0.5).
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h]

INSTALLED_APPS = [
    "console.site.ConsoleAdminConfig",  # django.contrib.admin, its site the console's (console/site.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "resonate_site",
    "promises",
    "tasks",
    "schedules",
    "timeouts",
    "outbox",
    "api",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "resonate_site.urls"
WSGI_APPLICATION = "resonate_site.wsgi.application"
ASGI_APPLICATION = "resonate_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def prepare_threshold(value):
    """DATABASE_PREPARE_THRESHOLD: a count of runs (0: prepare at once), or off."""
    value = value.strip().lower()
    if value in ("off", "none", ""):
        return None
    if not value.isdigit():
        raise ImproperlyConfigured(f"DATABASE_PREPARE_THRESHOLD must be a whole number or 'off', not {value!r}")
    return int(value)


def database_from_url(url):
    """One DATABASES entry from DATABASE_URL, tuned per backend (SQLite: WAL + immediate transactions)."""
    db = parse_database_url(url)
    if db["ENGINE"] == "django.db.backends.sqlite3":
        db["ENGINE"] = "floor.sqlite3"  # Django's, with one process's writers queued in Python (floor/sqlite3/base.py)
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
        }
        # Kept for the thread's life: opening one (its PRAGMAs, Django's SQL functions registered) cost more than
        # the request it served (bench/HISTORY.md, 2026-12-04). A file on this machine does not go away.
        db["CONN_MAX_AGE"] = None
    elif db["ENGINE"] == "django.db.backends.postgresql":
        db["ENGINE"] = "floor.postgresql"  # Django's, migrating without long locks (floor/postgresql/base.py)
        db["CONN_MAX_AGE"] = int(os.environ.get("DATABASE_CONN_MAX_AGE", "600"))
        # A database that does not answer a connect, or a connection whose peer went silent, is given up on
        # in seconds, not after TCP's minutes of retries.
        # Defaults only: options given in DATABASE_URL's query string (sslmode=verify-full, …) stay as given.
        options = db.setdefault("OPTIONS", {})
        for name, value in {
            "connect_timeout": 5,
            "keepalives": 1,
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
        }.items():
            options.setdefault(name, value)
        # Client-side binding (Django's default) is relied on where statements share a query string: a
        # transaction's first statement carries its BEGIN, and a commit carries the writes held for it. A hot
        # statement sent alone, and statements sent together (as one function of theirs: floor.functions), are
        # bound server-side (floor.rows.cursor_of), and prepared once a connection has sent them this many times:
        # PostgreSQL then plans them once. DATABASE_PREPARE_THRESHOLD=off behind a pooler in transaction mode,
        # which does not keep a session's prepared statements (the functions' own plans are kept either way).
        options["server_side_binding"] = False
        options.setdefault("prepare_threshold", prepare_threshold(os.environ.get("DATABASE_PREPARE_THRESHOLD", "5")))
        # No per-request health check (a round trip each): floor.transactions reconnects and
        # retries when a kept connection turns out to be dead.
    return db


def parse_database_url(url):
    """DATABASE_URL as dj-database-url reads it, and libpq's multi-host form too: postgres://u@h1:p1,h2:p2/db
    (with ?target_session_attrs=read-write, libpq tries the hosts in turn and keeps the one that takes writes: after
    a failover, the promoted standby). HOST and PORT then hold comma-separated lists, which libpq reads as such.
    A URL that cannot be read stops the process with a message that names DATABASE_URL (its password left out)."""
    scheme, _, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    credentials, _, hosts = netloc.rpartition("@")
    try:
        if "," not in hosts or scheme not in ("postgres", "postgresql", "pgsql"):
            return dj_database_url.parse(url)
        names, ports = zip(*(_host_and_port(host) for host in hosts.split(",")), strict=True)
        db = dj_database_url.parse(url.replace(netloc, f"{credentials}@multihost" if credentials else "multihost", 1))
    except (ValueError, dj_database_url.ParseError) as error:
        shown = url.replace(credentials, credentials.split(":", 1)[0] + ":***", 1) if ":" in credentials else url
        raise ImproperlyConfigured(
            f"DATABASE_URL {shown!r} cannot be read ({error}). Forms: postgres://user:password@host:port/name, "
            "postgres://user@host1:port1,host2:port2/name?target_session_attrs=read-write, sqlite:///path"
        ) from None
    db["HOST"] = ",".join(names)
    db["PORT"] = ",".join(ports) if any(ports) else ""
    return db


def _host_and_port(entry):
    """One host of a multi-host URL: (name, port or ''); an IPv6 address in brackets, [::1]:5432."""
    if entry.startswith("["):
        name, _, port = entry[1:].partition("]")
        port = port.removeprefix(":")
    else:
        name, _, port = entry.partition(":")
    if not name or (port and not port.isdigit()):
        raise ValueError(f"{entry!r} is not host:port")
    return name, port


# PostgreSQL migrations (floor/postgresql/base.py): a lock waited for at most 2 s, a statement at most 10 s (an
# index is built CONCURRENTLY, outside that bound). Unsafe operations are warned of, not refused: the released
# migrations of django-celery-beat add NOT NULL columns without a database default, harmless on the empty tables of
# a first migrate (where floor/postgresql/base.py does not warn of them); ours are checked by tests/test_migrations.py.
ZERO_DOWNTIME_MIGRATIONS_LOCK_TIMEOUT = "2s"
ZERO_DOWNTIME_MIGRATIONS_STATEMENT_TIMEOUT = "10s"
ZERO_DOWNTIME_MIGRATIONS_FLEXIBLE_STATEMENT_TIMEOUT = True

DEFAULT_SQLITE = BASE_DIR / "var" / "resonate.sqlite3"
DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL", f"sqlite:///{DEFAULT_SQLITE}"))}
if os.environ.get("DATABASE_TEST_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["DATABASE_TEST_NAME"]}
elif DATABASES["default"]["ENGINE"] == "floor.sqlite3":
    # A file, not memory: tests with several threads (live server, races) need WAL and real locking.
    main = Path(DATABASES["default"]["NAME"])
    DATABASES["default"]["TEST"] = {"NAME": str(main.with_name(f"test-{main.name}"))}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # empty unless collectstatic runs; WhiteNoise wants it to exist
# The admin's and the API docs' static files, served by the server itself from the installed apps.
WHITENOISE_USE_FINDERS = True

# The protocol endpoint reads raw bodies itself; keep Django's own limit out of its way.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

REST_FRAMEWORK = {
    # POST / authenticates by head.auth (resonate_site/auth.py); /api/ views name their own classes.
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The API answers JSON only: a `format` query parameter is an ordinary unknown parameter, not a request
    # for another renderer (DRF's default answered 404 "Not found." to ?format=anything-else).
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Resonate server REST API",
    "DESCRIPTION": "Operators' API over the same handlers as the protocol endpoint POST /.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The docs page's JavaScript is served from this server, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

RESONATE = from_environment()

# Celery: production mode's background workers (RESONATE_BACKGROUND=celery). Beat's schedule lives in
# the database (django-celery-beat) and is seeded from CELERY_BEAT_SCHEDULE when Beat starts.
# redis://…, or sentinel://h1:26379,h2:26379/service/db (floor/redis_urls.py), which kombu takes in its own form.
CELERY_BROKER_URL, _broker_options = redis_urls.broker(os.environ)
CELERY_TASK_IGNORE_RESULT = True
# Tasks are wake-up calls: what they act on (due timeouts, undelivered messages) is claimed in the database,
# and a task lost with its worker is made good by the next periodic one. Acknowledging on receipt also keeps
# the worker alive through a broker outage (kombu cannot restore unacknowledged messages without a broker).
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # workers log through LOGGING (RESONATE_LOG_FORMAT)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # workers and Beat wait out a broker outage of any length
CELERY_WORKER_CONSUMER = "resonate_site.celery:Consumer"  # ... and notice its end within 2 s
# Publishing runs after a request's commit: it must fail fast rather than hold the request when the broker is
# down or stalled (the periodic delivery pass sends what it could not announce).
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 2, "socket_connect_timeout": 2, "max_retries": 1}
CELERY_BROKER_TRANSPORT_OPTIONS.update(_broker_options)  # Sentinel's master_name
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "resonate_site.beat:Scheduler"  # django-celery-beat's, riding out database outages


CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "timeouts.tasks.sweep", "schedule": beat_seconds(RESONATE.get("SWEEP_PERIOD_MS", 2000))},
    "deliver": {"task": "outbox.tasks.deliver_due", "schedule": beat_seconds(RESONATE.get("DELIVERY_PASS_MS", 1000))},
}

# RESONATE_LOG_FORMAT=json: every line one JSON object (timestamp, level, logger, message, the record's extra fields).
# The logger resonate.request has a line per protocol request (floor/counters.py says at which level).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": ["levelname", "name", "message"],
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": True,
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if RESONATE.get("LOG_FORMAT") == "json" else "text",
            "filters": ["outages"],
        }
    },
    # A database or broker out of reach is one line, whoever logs it: a traceback in a log means a bug.
    "filters": {"outages": {"()": "floor.outages.OutagesInOneLine"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO").upper()},
    # Every 4xx of the protocol is an answer, not an incident.
    "loggers": {"django.request": {"level": "ERROR"}},
}
