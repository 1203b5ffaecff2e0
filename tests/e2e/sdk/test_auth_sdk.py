"""The released SDKs against a server that requires bearer JWTs: they send RESONATE_TOKEN as head.auth and
as the stream's Authorization header, and a token limited to a prefix is enough for a whole workflow."""

import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.e2e.conftest import FAST
from tests.e2e.sdk.conftest import client, run, run_node
from tests.e2e.servers import Client

pytestmark = pytest.mark.sdk

PRIVATE_KEY = ec.generate_private_key(ec.SECP256R1())


def token(**claims):
    return jwt.encode({"exp": int(time.time()) + 3600, **claims}, PRIVATE_KEY, "ES256")


@pytest.fixture(scope="module")
def server_settings(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "public.pem"
    path.write_bytes(
        PRIVATE_KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return {**FAST, "RESONATE_AUTH_PUBLIC_KEY_FILE": str(path)}


def test_workflows_run_with_a_prefix_token_and_nothing_runs_without_one(deployment, workers, group, monkeypatch):
    tenant = f"tenant-{uuid.uuid4().hex[:6]}-"
    monkeypatch.setenv("RESONATE_TOKEN", token(prefix=tenant))
    workers(group, env={"RESONATE_TOKEN": token(prefix=tenant)})
    workers(f"{group}-ts", language="typescript", env={"RESONATE_TOKEN": token(prefix=tenant)})

    async def python():
        async with client(deployment.client_url, group) as resonate:
            return await resonate.options(target=group).rpc(f"{tenant}fan", "fan_out", 5).result()

    assert run(python()) == {"local": 30, "remote": 30}
    typescript = run_node(["hello", deployment.client_url, f"{group}-ts", f"{tenant}ts"])
    assert typescript == {"run": "hello run", "rpc": "hello rpc"}

    assert Client(deployment.client_url)("promise.get", {"id": f"{tenant}fan"})[0] == 401
    assert Client(deployment.client_url, token(prefix="other-"))("promise.get", {"id": f"{tenant}fan"})[0] == 403
    assert Client(deployment.client_url, token(prefix=tenant))("promise.get", {"id": f"{tenant}fan"})[0] == 200
