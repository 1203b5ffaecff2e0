"""The RESONATE settings block: every default once, with its unit, overridable from the environment."""

import os

from django.conf import settings

DEFAULTS = {
    # Protocol
    "RETRY_TIMEOUT_MS": 5000,  # a pending task's execute is re-sent this often (spec ServerConfig.retryTimeout)
    "DEBUG": False,  # enables debug.* operations and head["resonate:debug_time"]
    "SERVER_URL": "",  # public URL of this server, sent as head.serverUrl in execute messages
    # Database
    "DB_RETRIES": 10,  # attempts for a request that loses a race (deadlock, serialization, duplicate create)
    # Request limits
    "MAX_BODY_BYTES": 10 * 1024 * 1024,
}

# Environment variable → (setting, parser). Environment variables override settings.py.
ENVIRONMENT = {
    "RESONATE_RETRY_TIMEOUT_MS": ("RETRY_TIMEOUT_MS", int),
    "RESONATE_DEBUG": ("DEBUG", lambda v: v.strip().lower() in {"1", "true", "yes", "on"}),
    "RESONATE_SERVER_URL": ("SERVER_URL", str),
    "RESONATE_DB_RETRIES": ("DB_RETRIES", int),
    "RESONATE_MAX_BODY_BYTES": ("MAX_BODY_BYTES", int),
}


def from_environment(environ=os.environ):
    """The overrides that the environment asks for, as a partial RESONATE dict."""
    overrides = {}
    for variable, (name, parse) in ENVIRONMENT.items():
        if variable in environ:
            overrides[name] = parse(environ[variable])
    return overrides


class ResonateSettings:
    """Attribute access to RESONATE settings, falling back to DEFAULTS (like DRF's api_settings)."""

    def __getattr__(self, name):
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown RESONATE setting: {name}")
        return getattr(settings, "RESONATE", {}).get(name, DEFAULTS[name])


resonate_settings = ResonateSettings()
