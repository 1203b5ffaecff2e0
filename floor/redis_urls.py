"""RESONATE_HUB_URL and CELERY_BROKER_URL: a Redis server, or the primary that Redis Sentinel names.

    redis://[:password@]host:6379/0                 one Redis (rediss:// with TLS)
    sentinel://[:password@]h1:26379,h2:26379,h3:26379/service[/db]

With Sentinel, every connection asks the sentinels which server is the primary of `service` (the name in their
`sentinel monitor` line) and connects to it; after a failover, a connection to the old primary fails (or finds it
read-only), and the next one goes to the new primary. The password, if any, is the Redis servers'; the sentinels
are asked without one. The same form serves the hub (redis-py's Sentinel) and Celery (kombu's sentinel transport,
to which broker() translates it).
"""

from dataclasses import dataclass
from urllib.parse import unquote

from django.core.exceptions import ImproperlyConfigured

SCHEMES = ("redis://", "rediss://", "sentinel://")


@dataclass(frozen=True)
class Sentinels:
    hosts: tuple  # ((host, port), …)
    service: str
    db: int
    password: str | None


def sentinels(url):
    """The Sentinels a sentinel:// URL names; None for another scheme. A URL that cannot be read is refused."""
    if not url.startswith("sentinel://") or ";" in url:  # kombu's own form (broker, below) is not this one
        return None
    rest = url[len("sentinel://") :]
    credentials, _, rest = rest.rpartition("@")
    hosts, _, path = rest.partition("/")
    service, _, db = path.partition("/")
    try:
        parsed = tuple(_host_and_port(entry) for entry in hosts.split(","))
        if not service:
            raise ValueError("no service name (the name in the sentinels' `sentinel monitor` line)")
        if db and not db.isdigit():
            raise ValueError(f"database {db!r} is not a number")
    except ValueError as error:
        raise ImproperlyConfigured(
            f"{_shown(url, credentials)} cannot be read ({error}); the form is "
            "sentinel://[:password@]host1:26379,host2:26379/service[/db]"
        ) from None
    password = unquote(credentials.partition(":")[2]) if credentials else None
    return Sentinels(parsed, service, int(db or 0), password or None)


def _host_and_port(entry):
    host, _, port = entry.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{entry!r} is not host:port")
    return host.strip("[]"), int(port)


def _shown(url, credentials):
    return url.replace(credentials, ":***", 1) if credentials else url


def sync_pool(url, **options):
    """A redis-py connection pool for this URL. `options` are BlockingConnectionPool's; with Sentinel the pool does
    not block (redis-py has no blocking Sentinel pool) and takes the rest."""
    import redis
    from redis.sentinel import Sentinel, SentinelConnectionPool

    found = sentinels(url)
    if found is None:
        return redis.BlockingConnectionPool.from_url(url, **options)
    manager = Sentinel(found.hosts, sentinel_kwargs=_sentinel_kwargs(options))
    return SentinelConnectionPool(found.service, manager, **_sentinel_pool_options(found, options))


def async_pool(url, **options):
    """The same for redis.asyncio."""
    import redis.asyncio
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

    found = sentinels(url)
    if found is None:
        return redis.asyncio.BlockingConnectionPool.from_url(url, **options)
    manager = Sentinel(found.hosts, sentinel_kwargs=_sentinel_kwargs(options))
    return SentinelConnectionPool(found.service, manager, **_sentinel_pool_options(found, options))


def _sentinel_kwargs(options):
    """Asking a sentinel is bounded as a command is."""
    return {name: options[name] for name in ("socket_timeout", "socket_connect_timeout") if name in options}


def _sentinel_pool_options(found, options):
    chosen = {name: value for name, value in options.items() if name not in ("timeout", "max_connections")}
    return {**chosen, "db": found.db, "password": found.password}


SERVICE = "RESONATE_BROKER_SENTINEL_SERVICE"  # the service of a sentinel:// broker, once in kombu's form


def broker(environ):
    """(the broker URL, transport options) for Celery from CELERY_BROKER_URL: kombu's own form for Sentinel, the URL
    as it is otherwise.

    Celery reads CELERY_BROKER_URL from the environment in preference to its settings, so a sentinel:// URL is
    rewritten there in kombu's form, with its service beside it (SERVICE): processes started from this one (uvicorn's
    server processes) read the same broker from both."""
    url = environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    if url.startswith("sentinel://") and ";" in url and environ.get(SERVICE):  # rewritten already
        return url, _kombu_options(environ[SERVICE])
    found = sentinels(url)
    if found is None:
        return url, {}
    auth = f":{found.password}@" if found.password else ""
    url = ";".join(f"sentinel://{auth}{host}:{port}/{found.db}" for host, port in found.hosts)
    environ["CELERY_BROKER_URL"], environ[SERVICE] = url, found.service
    return url, _kombu_options(found.service)


def _kombu_options(service):
    return {"master_name": service, "sentinel_kwargs": {"socket_timeout": 2, "socket_connect_timeout": 2}}
