"""POST /: decode a request envelope, run its operation in one transaction, encode the reply (PROTOCOL.md §1)."""

import logging
import time

import orjson
from django.http import HttpResponse
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from floor.clock import now_ms
from floor.conf import resonate_settings
from floor.counters import request_answered
from floor.protocol import I64_MAX, PROTOCOL_VERSION
from floor.transactions import Busy
from resonate_site.auth import Denied, authorize
from resonate_site.protocol.dispatch import OPERATIONS, run
from resonate_site.protocol.serializers import decode

log = logging.getLogger(__name__)

DEBUG_TIME = "resonate:debug_time"


class Refusal(Exception):
    """A request the server answers with an error status before running any operation."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status, self.message = status, message


def reply(kind, corr_id, status, data):
    return {"kind": kind, "head": {"corrId": corr_id, "status": status, "version": PROTOCOL_VERSION}, "data": data}


def decoded(body):
    """A request body's envelope, decoded (any JSON value), or None when the body is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def answer(body, now=None, envelope=None):
    """The reply envelope for one request body (bytes), or for `envelope`, the body already decoded. Never raises
    for bad input."""
    if envelope is None:
        try:
            envelope = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            return reply("unknown", "0", 400, f"Invalid request envelope: {error}")
    kind, corr_id = echoed(envelope)
    try:
        problem = envelope_problem(envelope)
        if problem:
            raise Refusal(400, f"Invalid request envelope: {problem}")
        operation, now = admit(envelope, now)
        req = validate(operation, envelope["data"])
        req["corr_id"] = corr_id
        if kind == "debug.tick" and envelope["head"].get(DEBUG_TIME, req["time"]) != req["time"]:
            raise Refusal(400, f"{DEBUG_TIME} must equal data.time in debug.tick")
        status, data = run(operation, req, now)
    except Refusal as refusal:
        return reply(kind, corr_id, refusal.status, refusal.message)
    except Busy as busy:  # lost races, or the database out of reach: nothing was committed, or it is unknown
        log.warning("%s %s: %s", kind, corr_id, busy)
        return reply(kind, corr_id, 503, busy.answer)
    except Exception:
        # A bug: what reproduces it goes with its traceback (the request's data and the time it ran at).
        log.exception("%s %s failed at %s: %s", kind, corr_id, now, excerpt(envelope.get("data")))
        return reply(kind, corr_id, 500, CRASHED["data"])
    return reply(kind, corr_id, status, data)


EXCERPT_CHARS = 4000  # of a failed request's data in its log line: enough for any protocol request but huge values


def excerpt(data):
    """A failed request's data as JSON for its log line, cut to EXCERPT_CHARS."""
    try:
        text = orjson.dumps(data).decode()
    except TypeError:
        text = repr(data)
    return text if len(text) <= EXCERPT_CHARS else f"{text[:EXCERPT_CHARS]}… ({len(text)} characters)"


def perform(kind, data, now=None):
    """Run one operation for the admin, the REST API or a management command: (status, data).

    The same validation, handler and single transaction as POST /, so nothing an operator does can
    skip the settlement scrub, a resume or a message. Debug operations are not reachable this way.
    Raises Refusal (400, 404 for an unknown kind) when the request is not valid, and Busy.
    """
    operation = OPERATIONS.get(kind)
    if operation is None or kind.startswith("debug."):
        raise Refusal(404, f"Unknown operation: {kind}")
    req = validate(operation, data)
    req["corr_id"] = "operator"
    return run(operation, req, now if now is not None else now_ms())


def answered(kind, data, now=None):
    """perform() with its refusals answered: (status, reply data or message). The console, the REST API and the
    commands all map an outcome to a status here; POST / maps the same exceptions the same way (respond)."""
    try:
        return perform(kind, data, now)
    except Refusal as refusal:
        return refusal.status, refusal.message
    except Busy as busy:
        return 503, busy.answer


def echoed(envelope):
    """The kind and corrId a reply echoes, as far as the envelope lets them be read (§1.3)."""
    if not isinstance(envelope, dict):
        return "unknown", "0"
    kind = envelope.get("kind")
    head = envelope.get("head")
    corr_id = head.get("corrId") if isinstance(head, dict) else None
    return (kind if isinstance(kind, str) else "unknown"), (corr_id if isinstance(corr_id, str) else "0")


def envelope_problem(envelope):
    """What is wrong with the envelope's required fields and their JSON types (§1.4 step 1), or None."""
    if not isinstance(envelope, dict):
        return "expected a JSON object"
    if not isinstance(envelope.get("kind"), str):
        return "'kind' must be a string"
    head = envelope.get("head")
    if not isinstance(head, dict):
        return "'head' must be an object"
    if not isinstance(head.get("corrId"), str):
        return "'head.corrId' must be a string"
    if not isinstance(head.get("version"), str):
        return "'head.version' must be a string"
    if "auth" in head and not isinstance(head["auth"], str):
        return "'head.auth' must be a string"
    debug_time = head.get(DEBUG_TIME)
    if DEBUG_TIME in head and (
        not isinstance(debug_time, int) or isinstance(debug_time, bool) or not 0 <= debug_time <= I64_MAX
    ):
        return f"'head.{DEBUG_TIME}' must be an integer between 0 and {I64_MAX}"
    if "data" not in envelope:
        return "'data' is required"
    return None


def admit(envelope, now):
    """The operation to run and the time to run it at (§1.4 steps 2-7)."""
    kind, head = envelope["kind"], envelope["head"]
    if kind == "":
        raise Refusal(400, "Missing or invalid 'kind' field — must be a non-empty string")
    if not isinstance(envelope["data"], dict):
        raise Refusal(400, "Invalid 'data' field — must be an object")
    if head["version"] != PROTOCOL_VERSION:
        supported = f'["{PROTOCOL_VERSION}"]'
        raise Refusal(400, f"Unsupported protocol version '{head['version']}', supported versions: {supported}")
    try:
        authorize(head.get("auth"), kind, envelope["data"])  # before the kind is looked up (§1.4 step 5)
    except Denied as denied:
        raise Refusal(denied.status, denied.message) from None
    operation = OPERATIONS.get(kind)
    if operation is None:
        raise Refusal(400, f"Unknown operation: {kind}")
    debug = resonate_settings.DEBUG
    if kind.startswith("debug.") and not debug:
        raise Refusal(403, "Debug operations are disabled")
    if debug and DEBUG_TIME in head:
        return operation, head[DEBUG_TIME]
    return operation, now if now is not None else now_ms()


def validate(operation, data):
    try:
        return decode(operation.request, data)
    except ValidationError as error:
        raise Refusal(400, f"Invalid request: {describe(error.detail)}") from None


def describe(errors, path=""):
    """DRF's nested error structure as one line: `action.data.timeoutAt: must be an integer`."""
    if isinstance(errors, dict):
        parts = []
        for field, inner in errors.items():
            name = path if field == "non_field_errors" else f"{path}.{field}" if path else field
            parts.append(describe(inner, name))
        return "; ".join(parts)
    if isinstance(errors, list):
        if all(isinstance(e, str) for e in errors):
            return f"{path or 'data'}: {' '.join(errors)}"
        return "; ".join(describe(e, f"{path}[{i}]") for i, e in enumerate(errors) if e)
    return f"{path or 'data'}: {errors}"


def declared_length(request):
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class NoNegotiation(BaseContentNegotiation):
    """The protocol always answers JSON; skip DRF's Accept-header negotiation (7% of a promise.get)."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


# The answer when answering itself failed: a bug, logged with its traceback; never Django's HTML page.
CRASHED = reply("unknown", "0", 500, "Internal server error")


class ProtocolView(APIView):
    """POST / — the one endpoint of the protocol. The HTTP status always equals head.status."""

    authentication_classes = ()
    permission_classes = ()
    parser_classes = ()
    renderer_classes = (JSONRenderer,)
    content_negotiation_class = NoNegotiation

    def post(self, request):
        limit = resonate_settings.MAX_BODY_BYTES
        if declared_length(request) > limit:
            status, body = refused(413, f"Request body larger than {limit} bytes")
        else:
            status, body = respond(request.body)
        return HttpResponse(body, status=status, content_type="application/json")


def respond(body, envelope=None):
    """POST / for one request body: (HTTP status, reply envelope as JSON), counted and logged; never raises.
    `envelope`: the body already decoded, when it was (decoded).

    Every way the protocol is served comes here: the server's own path (resonate_site/asgi.py) and
    Django's (ProtocolView, for WSGI servers and the test client).
    """
    started, replied = time.perf_counter(), CRASHED
    try:
        replied = answer(body, envelope=envelope)
    except Exception:
        log.exception("POST / failed: %s", body[:EXCERPT_CHARS])
    finally:
        request_answered(replied, time.perf_counter() - started, OPERATIONS)
    return replied["head"]["status"], orjson.dumps(replied)


def refused(status, message):
    """A request refused before it was read (too large, too slow): counted like any other answer."""
    envelope = reply("unknown", "0", status, message)
    request_answered(envelope, 0.0, OPERATIONS)
    return status, orjson.dumps(envelope)
