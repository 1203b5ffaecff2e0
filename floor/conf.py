"""The RESONATE settings block: every default once, with its unit; RESONATE_<NAME> overrides from the environment."""

import os
import threading

from django.conf import settings
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from floor import redis_urls

DEFAULTS = {
    # Protocol
    "RETRY_TIMEOUT_MS": 5000,  # a pending task's execute is re-sent this often (spec ServerConfig.retryTimeout)
    "DEBUG": False,  # enables debug.* operations and head["resonate:debug_time"]
    "SERVER_URL": "",  # public URL of this server, sent as head.serverUrl in execute messages (D14)
    "MAX_BODY_BYTES": 10 * 1024 * 1024,  # larger request bodies get a 413
    # Serving (manage.py serve): slow or idle clients must not hold the server's threads or sockets
    "READ_TIMEOUT_MS": 10_000,  # a request's headers, then its body, must each arrive within this (else closed / 408)
    "MAX_CONNECTIONS": 10_000,  # open connections (SSE streams included) per server process; more get a 503
    # serve --workers N: "auto" keeps each server process on a CPU of its own when there is one process per CPU it may
    # use (bin/production's default); "off" lets the kernel move them (resonate_site/serving.py, pin_processes)
    "CPU_AFFINITY": "auto",
    # Authentication of POST / and /poll (resonate_site/auth.py): bearer JWTs signed by this public key
    "AUTH_PUBLIC_KEY_FILE": "",  # path of a PEM public key (RSA, EC P-256/P-384 or Ed25519); "" = no auth
    "AUTH_ISSUER": "",  # when set, tokens must carry this `iss`
    "AUTH_AUDIENCE": "",  # when set, tokens must carry this `aud`
    "AUTH_DISABLED": False,  # run without auth where it is otherwise required (production, non-loopback hosts)
    # Database
    "DB_RETRIES": 10,  # attempts of a request that loses a race (deadlock, duplicate create) before a 503
    # A request that cannot reach the database waits this long for it (a failover's promotion, a restart) before its
    # 503: the released Python SDK does not retry a 503
    "DB_OUTAGE_WAIT_MS": 5000,
    # Background work: "embedded" (threads in the `serve` process) or "celery" (Celery workers and Beat)
    "BACKGROUND": "embedded",
    "SWEEP_PERIOD_MS": 2000,  # Celery Beat starts a sweep this often (whole seconds); each sweeps until the next
    "SWEEP_IDLE_MS": 50,  # longest sleep between looks for due timeouts (bounds lateness of new timers)
    "SWEEP_BATCH": 100,  # timeouts fired per transaction by the background sweep
    "SCHEDULE_CATCH_UP_MAX": 1000,  # occurrences one schedule timeout creates; a schedule further behind stays due
    # Delivery of execute/unblock messages
    "HUB_URL": "",  # where SSE streams meet deliverers across processes: "" = in memory, or redis://…
    "DELIVERY_PASS_MS": 1000,  # how often undelivered and retry-due messages are looked at again (Beat: whole s)
    "DELIVERY_ATTEMPTS": 8,  # HTTP push attempts before a message is marked failed (D13)
    "POLL_GRACE_MS": 10_000,  # how long a poll:// message waits for its stream to (re)connect before it is dropped
    "POLL_RETRY_MS": 500,  # how often it is tried meanwhile (SDKs reconnect after a 1 s backoff)
    "DELIVERY_BACKOFF_MS": 1000,  # first retry delay of an HTTP push; doubles per attempt
    "DELIVERY_BACKOFF_MAX_MS": 60000,
    "PUSH_TIMEOUT_MS": 10000,  # one HTTP push attempt
    "SSE_MAX_AGE_MS": 120_000,  # a poll stream ends after this, so the Python SDK reconnects (D12)
    "SSE_KEEPALIVE_MS": 15_000,  # a comment line this often on an idle stream
    # Observability. METRICS_DIR is a directory (path) shared by this machine's server processes and Celery workers:
    # each keeps its counters there and /metrics adds them up (prometheus_client multiprocess mode); "" = in memory.
    "METRICS_DIR": "",
    "LOG_FORMAT": "text",  # "text", or "json": one JSON object per log line
}

CHOICES = {"BACKGROUND": {"embedded", "celery"}, "LOG_FORMAT": {"text", "json"}, "CPU_AFFINITY": {"auto", "off"}}
POSITIVE = {
    "RETRY_TIMEOUT_MS",
    "MAX_BODY_BYTES",
    "READ_TIMEOUT_MS",
    "MAX_CONNECTIONS",
    "DB_RETRIES",
    "SWEEP_PERIOD_MS",
    "SWEEP_IDLE_MS",
    "SWEEP_BATCH",
    "SCHEDULE_CATCH_UP_MAX",
    "DELIVERY_PASS_MS",
    "DELIVERY_ATTEMPTS",
    "POLL_GRACE_MS",
    "POLL_RETRY_MS",
    "DELIVERY_BACKOFF_MS",
    "DELIVERY_BACKOFF_MAX_MS",
    "PUSH_TIMEOUT_MS",
    "SSE_MAX_AGE_MS",
    "SSE_KEEPALIVE_MS",
}


def parse(name, text):
    """An environment value, read as the type of the setting's default."""
    default = DEFAULTS[name]
    if isinstance(default, bool):
        return text.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(default, int):
        return int(text)
    return text


def from_environment(environ=os.environ):
    """The overrides that the environment asks for (RESONATE_<NAME>), as a partial RESONATE dict."""
    overrides = {}
    for name in DEFAULTS:
        variable = f"RESONATE_{name}"
        if variable in environ:
            try:
                overrides[name] = parse(name, environ[variable])
            except ValueError:
                overrides[name] = environ[variable]  # reported by the system check below
    return overrides


def beat_seconds(ms):
    """A period for Celery Beat: django-celery-beat keeps intervals in whole seconds, never below one."""
    return max(1, round(ms / 1000))


class ResonateSettings:
    """Attribute access to RESONATE settings, falling back to DEFAULTS (like DRF's api_settings).

    A setting read once is kept as an attribute of this object (requests read several each), until the
    settings change (`setting_changed`: override_settings, pytest-django's `settings`). A value read from the
    settings as they were before a change is not kept: `changes` counts them, under `lock`.
    """

    lock = threading.Lock()
    changes = 0

    def __getattr__(self, name):
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown RESONATE setting: {name}")
        changes = self.changes
        value = getattr(settings, "RESONATE", {}).get(name, DEFAULTS[name])
        with self.lock:
            if self.changes == changes:
                setattr(self, name, value)
        return value

    def forget(self):
        with self.lock:
            changes = self.changes + 1
            self.__dict__.clear()
            self.changes = changes


resonate_settings = ResonateSettings()


@receiver(setting_changed)
def forget_settings(setting, **kwargs):
    if setting == "RESONATE":
        resonate_settings.forget()


@register()
def check_settings(app_configs, **kwargs):
    """manage.py check fails on a RESONATE setting of the wrong type or out of range."""
    errors = []
    configured = getattr(settings, "RESONATE", {})
    for name, value in configured.items():
        if name not in DEFAULTS:
            errors.append(Error(f"RESONATE['{name}'] is not a setting", id="resonate.E001"))
            continue
        expected = type(DEFAULTS[name])
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            errors.append(Error(f"RESONATE['{name}'] must be {expected.__name__}, got {value!r}", id="resonate.E002"))
        elif name in POSITIVE and value < 1:
            errors.append(Error(f"RESONATE['{name}'] must be at least 1, got {value!r}", id="resonate.E003"))
        elif name in CHOICES and value not in CHOICES[name]:
            errors.append(Error(f"RESONATE['{name}'] must be one of {sorted(CHOICES[name])}", id="resonate.E004"))
    if resonate_settings.BACKGROUND == "celery" and not resonate_settings.HUB_URL.startswith(redis_urls.SCHEMES):
        errors.append(
            Error(
                "RESONATE_BACKGROUND=celery needs RESONATE_HUB_URL=redis://… or sentinel://… (streams span processes)",
                id="resonate.E005",
            )
        )
    try:
        redis_urls.sentinels(resonate_settings.HUB_URL)
    except ImproperlyConfigured as error:
        errors.append(Error(f"RESONATE_HUB_URL {error}", id="resonate.E006"))
    return errors
