"""Bearer JWTs on POST / (head.auth) and /poll (Authorization), as PROTOCOL.md §8.1 describes."""

import base64
import hmac
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.core.exceptions import ImproperlyConfigured

from resonate_site import auth
from tests.conftest import create, targeted

KEYS = {
    "RS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ES256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "EdDSA": ed25519.Ed25519PrivateKey.generate,
}


def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def pem(public_key):
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class Issuer:
    """Signs tokens with a private key whose public half the server is configured with."""

    def __init__(self, algorithm, private_key):
        self.algorithm, self.private_key = algorithm, private_key

    def token(self, expires_in=60, **claims):
        return jwt.encode({"exp": int(time.time()) + expires_in, **claims}, self.private_key, self.algorithm)


@pytest.fixture(params=sorted(KEYS))
def issuer(request, settings, tmp_path):
    private_key = KEYS[request.param]()
    path = tmp_path / f"{request.param}.pem"
    path.write_bytes(pem(private_key.public_key()))
    settings.RESONATE = {**settings.RESONATE, "AUTH_PUBLIC_KEY_FILE": str(path)}
    return Issuer(request.param, private_key)


def as_(protocol, token):
    """The protocol client, sending this token in head.auth."""
    return lambda kind, data: protocol(kind, data, head={"auth": token} if token is not None else {})


def test_an_admin_token_may_do_everything(protocol, issuer):
    send = as_(protocol, issuer.token(role="Admin"))
    assert send("promise.create", create("any.thing", 10**13)).status == 200
    assert send("promise.search", {}).status == 200
    assert send("debug.snap", {}).status == 200


@pytest.mark.parametrize("token", [None, "", "not-a-jwt", "a.b.c"])
def test_a_missing_or_malformed_token_is_unauthorized(protocol, issuer, token):
    answer = as_(protocol, token)("promise.create", create("a", 10**13))
    assert answer.status == 401 and answer.data.startswith("Unauthorized")
    assert protocol("debug.snap", {}, head={"auth": issuer.token(role="admin")}).data["promises"] == []


def test_expired_forged_and_claimless_tokens_are_unauthorized(protocol, issuer):
    other = Issuer(issuer.algorithm, KEYS[issuer.algorithm]())
    no_exp = jwt.encode({"role": "admin"}, issuer.private_key, issuer.algorithm)
    for token in [issuer.token(expires_in=-120, role="admin"), other.token(role="admin"), no_exp]:
        assert as_(protocol, token)("promise.get", {"id": "a"}).status == 401


def test_a_token_signed_with_a_symmetric_algorithm_is_refused(protocol, issuer, settings):
    # The classic confusion attack: HS256 "signed" with the public key's own bytes.
    with open(settings.RESONATE["AUTH_PUBLIC_KEY_FILE"], "rb") as f:
        public = f.read()
    header, payload = b64url(b'{"alg":"HS256","typ":"JWT"}'), b64url(b'{"role":"admin","exp":9999999999}')
    signature = b64url(hmac.digest(public, header + b"." + payload, "sha256"))
    forged = (header + b"." + payload + b"." + signature).decode()
    assert as_(protocol, forged)("promise.get", {"id": "a"}).status == 401


def test_a_prefix_limits_a_token_to_its_ids(protocol, issuer):
    send = as_(protocol, issuer.token(prefix="tenant-a/"))
    assert send("promise.create", create("tenant-a/1", 10**13)).status == 200
    assert send("promise.get", {"id": "tenant-a/1"}).status == 200
    assert send("promise.create", create("tenant-b/1", 10**13)).status == 403
    assert send("promise.register_listener", {"awaited": "tenant-b/1", "address": "poll://uni@g/1"}).status == 403
    task = {"pid": "w", "ttl": 1000, "action": {"kind": "promise.create", "head": {}, "data": targeted("x", 10**13)}}
    assert send("task.create", task).status == 403
    assert (
        send(
            "task.heartbeat", {"pid": "w", "tasks": [{"id": "tenant-a/1", "version": 1}, {"id": "b", "version": 1}]}
        ).status
        == 403
    )
    assert send("promise.search", {}).status == 403  # a search names no id: admin or an empty prefix only


def test_a_prefix_covers_every_id_a_request_names_nested_actions_included(protocol, issuer):
    admin = as_(protocol, issuer.token(role="admin"))
    assert admin("promise.create", targeted("tenant-a/wf", 10**13)).status == 200
    assert admin("promise.create", create("tenant-b/secret", 10**13)).status == 200
    assert admin("task.acquire", {"id": "tenant-a/wf", "version": 0, "pid": "w", "ttl": 60_000}).status == 200
    send = as_(protocol, issuer.token(prefix="tenant-a/"))
    settle = {"kind": "promise.settle", "head": {}, "data": {"id": "tenant-b/secret", "state": "resolved"}}
    assert send("task.fence", {"id": "tenant-a/wf", "version": 1, "action": settle}).status == 403
    callback = {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": "tenant-b/secret", "awaiter": "tenant-a/wf"},
    }
    assert send("task.suspend", {"id": "tenant-a/wf", "version": 1, "actions": [callback]}).status == 403
    assert send("promise.register_callback", callback["data"]).status == 403
    schedule = {
        "id": "tenant-b-nightly",
        "cron": "0 3 * * *",
        "promiseId": "tenant-a/{{.timestamp}}",
        "promiseTimeout": 1,
    }
    assert send("schedule.create", schedule).status == 403
    assert admin("promise.get", {"id": "tenant-b/secret"}).data["promise"]["state"] == "pending"
    assert send("task.heartbeat", {"pid": "w", "tasks": []}).status == 200  # extension E1: the caller's own pid


def test_a_token_issued_by_a_clock_slightly_ahead_is_accepted(protocol, issuer):
    ahead = issuer.token(role="admin", iat=int(time.time()) + 30, nbf=int(time.time()) + 30)
    assert as_(protocol, ahead)("promise.get", {"id": "a"}).status == 404


def test_an_empty_prefix_allows_everything_and_no_prefix_nothing(protocol, issuer):
    assert as_(protocol, issuer.token(prefix=""))("promise.search", {}).status == 200
    assert as_(protocol, issuer.token())("promise.get", {"id": "a"}).status == 403
    assert as_(protocol, issuer.token(prefix=7))("promise.get", {"id": "a"}).status == 403


def test_issuer_and_audience_are_checked_when_configured(protocol, issuer, settings):
    settings.RESONATE = {**settings.RESONATE, "AUTH_ISSUER": "https://id.example", "AUTH_AUDIENCE": "resonate"}
    good = issuer.token(role="admin", iss="https://id.example", aud="resonate")
    assert as_(protocol, good)("promise.get", {"id": "a"}).status == 404
    for token in [
        issuer.token(role="admin", iss="https://evil.example", aud="resonate"),
        issuer.token(role="admin", iss="https://id.example", aud="other"),
        issuer.token(role="admin"),
    ]:
        assert as_(protocol, token)("promise.get", {"id": "a"}).status == 401


def test_auth_comes_before_the_unknown_kind_check(protocol, issuer):
    assert as_(protocol, issuer.token(prefix="x"))("promise.frobnicate", {"id": "x1"}).status == 403
    assert as_(protocol, None)("promise.frobnicate", {}).status == 401


def test_streams_need_a_valid_bearer_token(client, db, issuer):
    assert client.get("/poll/g/1").status_code == 401
    assert client.get("/poll/g/1", headers={"Authorization": "Bearer nonsense"}).status_code == 401
    expired = issuer.token(expires_in=-120, prefix="")
    assert client.get("/poll/g/1", headers={"Authorization": f"Bearer {expired}"}).status_code == 401


def test_without_a_key_everyone_is_let_in(protocol):
    assert protocol("promise.create", create("a", 10**13)).status == 200


@pytest.mark.parametrize(
    "background, host, disabled, refused",
    [
        ("embedded", "127.0.0.1", False, False),
        ("embedded", "::1", False, False),
        ("embedded", "0.0.0.0", False, True),
        ("embedded", "0.0.0.0", True, False),
        ("celery", None, False, True),
        ("celery", None, True, False),
    ],
)
def test_servers_refuse_to_start_unprotected_outside_a_loopback_embedded_server(
    settings, background, host, disabled, refused
):
    settings.RESONATE = {**settings.RESONATE, "BACKGROUND": background, "AUTH_DISABLED": disabled}
    if refused:
        with pytest.raises(ImproperlyConfigured):
            auth.refuse_unprotected(host)
    else:
        auth.refuse_unprotected(host)
    # The deploy check knows no host: it refuses production only.
    assert [e.id for e in auth.check_auth(None)] == (["resonate.E010"] if refused and host is None else [])
