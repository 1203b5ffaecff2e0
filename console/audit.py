"""Who did what by hand: every operation the console runs for an operator is recorded in Django admin's log,
which the object's History page shows (who, when, what was sent, what the server answered), and logged on the
server (logger resonate.console), failures and refusals included."""

import logging

import orjson
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType

log = logging.getLogger("resonate.console")

SENT_CHARS = 2_000  # what was sent, as JSON, is cut here in the record (a value can be large); the log has it whole


def recorded(request, model, object_id, kind, data, outcome):
    """Record that the operator behind `request` ran protocol operation `kind` with `data` on the object of `model`
    with primary key `object_id`, and that it ended in `outcome` (e.g. "200 resolved", "409 …")."""
    sent = orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()
    shown = sent if len(sent) <= SENT_CHARS else sent[:SENT_CHARS] + "…"
    user = request.user
    LogEntry.objects.create(
        user_id=user.pk,
        content_type=ContentType.objects.get_for_model(model),
        object_id=str(object_id),
        object_repr=str(object_id)[:200],
        action_flag=CHANGE,
        change_message=f"{kind} {shown}: {outcome}",
    )
    log.info(
        "console: %s ran %s on %s: %s",
        user.get_username(),
        kind,
        object_id,
        outcome,
        extra={"operator": user.get_username(), "operation": kind, "object": str(object_id), "sent": sent},
    )
