"""The REST API's viewsets: every action runs one protocol operation through perform() and answers its reply.

A request body is the operation's `data` (PROTOCOL.md's camelCase names) less what the URL names; the
response is the reply data POST / would carry, with its status (200, creates included: they are
idempotent). Errors are {"error": message}: the protocol's 400/404/409/422, 503 when the database
stays too busy, and DRF's own 401/403/405/415.
"""

import functools
import re

import orjson
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import parsers, viewsets
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import ParseError
from rest_framework.permissions import IsAdminUser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler

from api import serializers as s
from api.routers import ANY_ID
from promises.models import PromiseState
from resonate_site.protocol.envelope import answered
from tasks.models import TaskState


def reply(kind, data):
    status, data = answered(kind, data)
    return Response({"error": data} if status >= 400 else data, status=status)


def body(request):
    if not isinstance(request.data, dict):
        raise ParseError("The request body must be a JSON object")
    return request.data


def search(query):
    """A search's data from the query string; each operation reads the filters it knows."""
    data = {name: query[name] for name in ("state", "cursor") if name in query}
    if "limit" in query:
        data["limit"] = integer(query["limit"])
    data["tags"] = tags(query)
    return data


def tags(query):
    """The `tags[key]=value` pairs of a query string (OpenAPI's deepObject style)."""
    pairs = {name[5:-1]: value for name, value in query.items() if name.startswith("tags[") and name.endswith("]")}
    if any("][" in key for key in pairs):
        raise ParseError("Invalid request: tags: a tag's value is a string, not an object (tags[a][b])")
    return pairs


def integer(text):
    """The integer a query string spells, or the text itself for the protocol to refuse."""
    return int(text) if re.fullmatch(r"-?[0-9]{1,30}", text) else text


# The OpenAPI description of each operation.

ERRORS = {
    400: "Invalid request: the message names the field.",
    401: "No valid credentials (a token: `Authorization: Token <key>`, or a session).",
    403: "A session without a valid CSRF token.",
    404: "Not found.",
    409: "Conflict: the task is not in a state, or at the version, that allows this.",
    422: "The request refers to a promise that cannot be used for it.",
    503: "The database stayed busy; retry.",
}
ID = OpenApiParameter(
    "id",
    str,
    OpenApiParameter.PATH,
    description="Any id, percent-encoded (`/` may be left as is: the id is the rest of the path).",
    examples=[OpenApiExample("An id", value="order-42")],
)
CURSOR = OpenApiParameter("cursor", str, description="The `cursor` of the previous page.")
TAGS = OpenApiParameter(
    "tags",
    {"type": "object", "additionalProperties": {"type": "string"}},
    style="deepObject",
    explode=True,
    description="Tags that must all be present with exactly these values: `tags[resonate:target]=poll://any@default`.",
)


def limit(default):
    return OpenApiParameter(
        "limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": default}, description="Page size."
    )


def state(choices, description):
    return OpenApiParameter("state", str, enum=choices.values, description=description)


def operation(kind, response, request=None, errors=(), parameters=()):
    """Serve the protocol operation `kind`: the method turns the HTTP request into the operation's data."""

    def decorate(method):
        @functools.wraps(method)
        def view(self, request, **kwargs):
            return reply(kind, method(self, request, **kwargs))

        unsafe = method.__name__ not in ("list", "retrieve")  # a session needs a CSRF token for the others
        codes = sorted({400, 401, 503, *errors, *([403] if unsafe else [])})
        responses = {200: response} | {code: OpenApiResponse(s.Error, description=ERRORS[code]) for code in codes}
        return extend_schema(operation_id=kind, request=request, responses=responses, parameters=list(parameters))(view)

    return decorate


class ProtocolJSONParser(parsers.JSONParser):
    """POST /'s decoder (orjson): lone surrogates and integers beyond 64 bits are refused, as there."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return orjson.loads(stream.read())
        except orjson.JSONDecodeError as error:
            raise ParseError(f"JSON parse error - {error}") from error


def error_reply(exc, context):
    """DRF's own refusals (credentials, CSRF, method, media type, body) as {"error": message}."""
    response = exception_handler(exc, context)
    if response is not None:
        response.data = {"error": str(response.data.get("detail", response.data))}
    return response


class ProtocolViewSet(viewsets.ViewSet):
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAdminUser]  # operators: staff users of the console
    parser_classes = [ProtocolJSONParser]
    renderer_classes = [JSONRenderer]
    lookup_field = "id"
    lookup_value_regex = ANY_ID

    def get_exception_handler(self):
        return error_reply


class PromiseViewSet(ProtocolViewSet):
    @operation(
        "promise.search",
        s.PromisePage,
        parameters=[
            state(PromiseState, "The state as it reads now: an expired pending promise has its timeout state."),
            TAGS,
            limit(100),
            CURSOR,
        ],
    )
    def list(self, request):
        """Promises in id order, filtered as promise.search does, a page at a time."""
        return search(request.query_params)

    @operation("promise.get", s.PromiseReply, errors=[404], parameters=[ID])
    def retrieve(self, request, id):
        """A promise as it reads now: a pending one past its timeoutAt reads as settled by its timeout."""
        return {"id": id}

    @operation("promise.create", s.PromiseReply, request=s.PromiseCreateRequest)
    def create(self, request):
        """Create a promise; an existing one is returned as it is (nothing is compared)."""
        return body(request)

    @operation("promise.settle", s.PromiseReply, request=s.SettleRequest, errors=[404], parameters=[ID])
    @action(detail=True, methods=["post"])
    def settle(self, request, id):
        """Settle a pending promise; a settled one is returned unchanged."""
        return {**body(request), "id": id}

    @operation(
        "promise.register_callback", s.PromiseReply, request=s.CallbackRequest, errors=[404, 422], parameters=[ID]
    )
    @action(detail=True, methods=["post"], url_path="callbacks")
    def register_callback(self, request, id):
        """Resume the awaiter's task when this promise settles."""
        return {**body(request), "awaited": id}

    @operation("promise.register_listener", s.PromiseReply, request=s.ListenerRequest, errors=[404], parameters=[ID])
    @action(detail=True, methods=["post"], url_path="listeners")
    def register_listener(self, request, id):
        """Send an unblock message to the address when this promise settles."""
        return {**body(request), "awaited": id}


class TaskViewSet(ProtocolViewSet):
    @operation(
        "task.search",
        s.TaskPage,
        parameters=[state(TaskState, "The state as it reads now (task.get's)."), limit(100), CURSOR],
    )
    def list(self, request):
        """Tasks in id order, filtered as task.search does, a page at a time."""
        return search(request.query_params)

    @operation("task.get", s.TaskReply, errors=[404], parameters=[ID])
    def retrieve(self, request, id):
        """A task as it reads now."""
        return {"id": id}

    @operation("task.acquire", s.TaskAcquired, request=s.AcquireRequest, errors=[404, 409], parameters=[ID])
    @action(detail=True, methods=["post"])
    def acquire(self, request, id):
        """Acquire a pending task at the version its execute message carried."""
        return {**body(request), "id": id}

    @operation("task.release", s.DONE, request=s.ReleaseRequest, errors=[404, 409], parameters=[ID])
    @action(detail=True, methods=["post"])
    def release(self, request, id):
        """Give an acquired task back: pending again, at the same version."""
        return {**body(request), "id": id}

    @operation("task.fulfill", s.PromiseReply, request=s.FulfillRequest, errors=[404, 409], parameters=[ID])
    @action(detail=True, methods=["post"])
    def fulfill(self, request, id):
        """Settle an acquired task's promise, fulfilling the task."""
        settle = {**body(request), "id": id}
        return {**settle, "action": {"kind": "promise.settle", "data": settle}}

    @operation("task.halt", s.DONE, errors=[404, 409], parameters=[ID])
    @action(detail=True, methods=["post"])
    def halt(self, request, id):
        """Stop dispatching a task until it is continued."""
        return {"id": id}

    @operation("task.continue", s.DONE, errors=[404, 409], parameters=[ID])
    @action(detail=True, methods=["post"], url_path="continue", url_name="continue")
    def continue_(self, request, id):
        """Make a halted task pending again and offer it to its target."""
        return {"id": id}


class ScheduleViewSet(ProtocolViewSet):
    @operation("schedule.search", s.SchedulePage, parameters=[TAGS, limit(10), CURSOR])
    def list(self, request):
        """Schedules in id order, filtered by promiseTags, a page at a time."""
        return search(request.query_params)

    @operation("schedule.get", s.ScheduleReply, errors=[404], parameters=[ID])
    def retrieve(self, request, id):
        """A schedule."""
        return {"id": id}

    @operation("schedule.create", s.ScheduleReply, request=s.ScheduleCreateRequest)
    def create(self, request):
        """Create a schedule; an existing one is returned as it is (nothing is compared)."""
        return body(request)

    @operation("schedule.delete", s.DONE, errors=[404], parameters=[ID])
    def destroy(self, request, id):
        """Delete a schedule; the promises it created are left alone."""
        return {"id": id}
