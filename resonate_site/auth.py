"""Who may do what on POST / and /poll: bearer JWTs verified with the configured public key (PROTOCOL.md §8.1).

A token's claims decide: `role: admin` (any letter case) may do everything; otherwise the `prefix` claim
must be a string, and a non-empty prefix must start the request's resource id. The token travels in
head.auth on POST / and in the Authorization header on /poll, which authenticates but does not authorise
(as in the reference server): any valid token may open any stream.

Auth is on whenever RESONATE_AUTH_PUBLIC_KEY_FILE names a key. Without one it is off, which is allowed
only for the embedded server on a loopback address, or when RESONATE_AUTH_DISABLED says so.
"""

import ipaddress
from functools import cache

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from floor.conf import resonate_settings

UNAUTHORIZED, FORBIDDEN = (401, "Unauthorized"), (403, "Forbidden")
LEEWAY_S = 60  # clock skew tolerated between the token issuer and this server (exp, iat, nbf)


class Denied(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status, self.message = status, message


def enabled():
    return bool(resonate_settings.AUTH_PUBLIC_KEY_FILE)


@cache
def _key(path):
    """The public key in this PEM file and the signature algorithms its type allows."""
    try:
        with open(path, "rb") as f:
            key = load_pem_public_key(f.read())
    except (OSError, ValueError) as error:
        raise ImproperlyConfigured(f"RESONATE_AUTH_PUBLIC_KEY_FILE {path!r}: {error}") from error
    if isinstance(key, rsa.RSAPublicKey):
        return key, ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in ("secp256r1", "secp384r1"):
        return key, ["ES256"] if key.curve.name == "secp256r1" else ["ES384"]
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key, ["EdDSA"]
    raise ImproperlyConfigured(f"RESONATE_AUTH_PUBLIC_KEY_FILE {path!r}: not an RSA, EC P-256/P-384 or Ed25519 key")


def claims(token):
    """The verified claims of a token; Denied(401) for a missing, malformed, expired or forged one."""
    if not isinstance(token, str) or not token:
        raise Denied(*UNAUTHORIZED)
    key, algorithms = _key(resonate_settings.AUTH_PUBLIC_KEY_FILE)
    required = ["exp"]
    options = {"require": required, "verify_aud": bool(resonate_settings.AUTH_AUDIENCE)}
    if resonate_settings.AUTH_ISSUER:
        required.append("iss")
    try:
        return jwt.decode(
            token,
            key,
            algorithms=algorithms,
            issuer=resonate_settings.AUTH_ISSUER or None,
            audience=resonate_settings.AUTH_AUDIENCE or None,
            options=options,
            leeway=LEEWAY_S,
        )
    except jwt.PyJWTError as error:
        raise Denied(UNAUTHORIZED[0], f"Unauthorized: {error}") from error


BY_ID = {
    "promise.get",
    "promise.create",
    "promise.settle",
    "task.get",
    "task.acquire",
    "task.release",
    "task.fulfill",
    "task.halt",
    "task.continue",
    "schedule.get",
    "schedule.delete",
}


def inner(action, field):
    """A field of a nested action's data (task.create, task.fence, task.suspend), when it is there."""
    data = action.get("data") if isinstance(action, dict) else None
    return data.get(field) if isinstance(data, dict) else None


def resource_ids(kind, data):
    """Every id a request names (§8.1, plus the ids of nested actions); [""] for searches, debug and unknown kinds.

    Beyond the reference server, nested actions count too: a fence's inner promise.create or settle and a
    suspend's awaited promises act on ids of their own, so a prefix must cover them as well.
    """
    if kind in BY_ID:
        ids = [data.get("id")]
    elif kind == "promise.register_callback":
        ids = [data.get("awaited"), data.get("awaiter")]
    elif kind == "promise.register_listener":
        ids = [data.get("awaited")]
    elif kind == "schedule.create":
        ids = [data.get("id"), data.get("promiseId")]
    elif kind == "task.create":
        ids = [inner(data.get("action"), "id")]
    elif kind == "task.fence":
        ids = [data.get("id"), inner(data.get("action"), "id")]
    elif kind == "task.suspend":
        actions = data.get("actions")
        ids = [data.get("id"), *(inner(a, "awaited") for a in (actions if isinstance(actions, list) else []))]
    elif kind == "task.heartbeat":
        # An empty list renews the caller's own pid's leases (extension E1; the TypeScript SDK sends only that).
        tasks = data.get("tasks")
        ids = [t.get("id") for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []
    else:
        return [""]
    return [id for id in ids if isinstance(id, str)]  # a missing id is the decoder's to refuse


def authorize(token, kind, data):
    """POST /: raise Denied unless the token allows this operation on these ids. No-op when auth is off."""
    if not enabled():
        return
    granted = claims(token)
    role = granted.get("role")
    if isinstance(role, str) and role.lower() == "admin":
        return
    prefix = granted.get("prefix")
    if not isinstance(prefix, str):
        raise Denied(FORBIDDEN[0], "Forbidden: the token has no prefix claim")
    if prefix and not all(id.startswith(prefix) for id in resource_ids(kind, data)):
        raise Denied(FORBIDDEN[0], f"Forbidden: outside the token's prefix {prefix!r}")


def authenticate_stream(authorization):
    """/poll: raise Denied unless the Authorization header carries a valid bearer token."""
    if not enabled():
        return
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        raise Denied(*UNAUTHORIZED)
    claims(token.strip())


def is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_unprotected(host=None):
    """Stop a server from starting without auth where that is unsafe: production, or a non-loopback host."""
    if enabled() or resonate_settings.AUTH_DISABLED:
        return
    if resonate_settings.BACKGROUND != "embedded":
        raise ImproperlyConfigured(
            "production mode needs RESONATE_AUTH_PUBLIC_KEY_FILE (or RESONATE_AUTH_DISABLED=true to run without auth)"
        )
    if host is not None and not is_loopback(host):
        raise ImproperlyConfigured(
            f"serving on {host} needs RESONATE_AUTH_PUBLIC_KEY_FILE (or RESONATE_AUTH_DISABLED=true)"
        )


@register(deploy=True)
def check_auth(app_configs, **kwargs):
    """manage.py check --deploy (and every production start) fails without auth unless it is disabled."""
    try:
        refuse_unprotected()
        if enabled():
            _key(resonate_settings.AUTH_PUBLIC_KEY_FILE)
    except ImproperlyConfigured as error:
        return [Error(str(error), id="resonate.E010")]
    return []
