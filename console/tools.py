"""What the operations console's pages share: dates from milliseconds, decoded payloads, cheap paging, and
running protocol operations on behalf of an operator (recorded: console/audit.py)."""

import base64
import json

from django.contrib import messages
from django.core.paginator import Paginator
from django.utils.functional import cached_property
from django.utils.html import format_html

from console.audit import recorded
from floor.clock import utc_datetime
from floor.lineage import NOT_JSON, sdk_data
from resonate_site.protocol.envelope import answered

COUNT_CAP = 10_000  # lists count at most this many rows, then say "10000+": no full COUNT(*) over millions


class Operable:
    """For read-only pages whose actions run protocol operations: the actions need the model's change
    permission (its rows are never edited by hand, so that permission means "may operate")."""

    def has_operate_permission(self, request):
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")


class CappedPaginator(Paginator):
    """Counts no further than COUNT_CAP rows, so a list page costs the same on a table of millions."""

    @cached_property
    def count(self):
        return self.object_list[: COUNT_CAP + 1].count()


def date(ms):
    """A millisecond timestamp as an ISO date in UTC ("—" for none)."""
    if ms is None:
        return "—"
    at = utc_datetime(ms)
    return f"{ms} ms" if at is None else at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def decoded(value):
    """A protocol value ({headers?, data?}) for people: data decoded from base64 JSON when it is that."""
    if not value:
        return "—"
    shown = dict(value)
    data = sdk_data(value)
    if data is not NOT_JSON:  # otherwise shown as stored
        shown["data"] = data
    return format_html("<pre>{}</pre>", json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True))


def pretty(value):
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


def encoded(text):
    """An operator's optional value, typed as JSON, as a protocol value (data = base64 of the JSON)."""
    if text is None or not text.strip():
        return {}
    json.loads(text, parse_constant=refuse)  # raises ValueError for text that is not JSON
    return {"data": base64.b64encode(text.strip().encode()).decode()}


def refuse(constant):
    raise ValueError(f"{constant} is not JSON that the SDKs read")


def perform_each(request, model, kind, requests, done, unchanged=lambda data, answer: None):
    """Run one protocol operation per request, each in its own transaction, on objects of `model` (their ids are
    the requests' "id"); report every outcome to the operator and record it (console.audit).

    `done` names the success ("resolved"); failures (404, 409, bad input, busy) are reported, not raised,
    and so is a 200 that `unchanged(data, answer)` explains as not having done what was asked.
    """
    succeeded = 0
    for data in requests:
        status, answer = answered(kind, data)
        problem = f"{status} {answer}" if status != 200 else unchanged(data, answer)
        recorded(request, model, data.get("id"), kind, data, f"{status} {problem or done}")
        if problem:
            messages.error(request, f"{kind} {data.get('id')}: {problem}")
        else:
            succeeded += 1
    if succeeded:
        messages.success(request, f"{succeeded} {done}.")
    return succeeded
