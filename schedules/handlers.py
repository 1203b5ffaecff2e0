"""schedule.* handlers (spec S-01 … S-04): each takes the decoded request and `now`, and returns a Reply."""

from floor.protocol import SCHEDULE_NOT_FOUND, ok, page, searched, tagged
from schedules.cron import next_cron
from schedules.models import Schedule


def schedule_get(req, now):
    """S-01."""
    schedule = Schedule.objects.filter(pk=req["id"]).first()
    if schedule is None:
        return SCHEDULE_NOT_FOUND
    return ok(schedule=schedule.to_record())


def schedule_create(req, now):
    """S-02: an existing schedule is returned unchanged; a new one first runs at the next cron time after now."""
    existing = Schedule.objects.filter(pk=req["id"]).first()
    if existing is not None:
        return ok(schedule=existing.to_record())
    schedule = Schedule(
        id=req["id"],
        cron=req["cron"],
        promise_id=req["promise_id"],
        promise_timeout=req["promise_timeout"],
        promise_param=req["promise_param"],
        promise_tags=req["promise_tags"],
        created_at=now,
        next_run_at=next_cron(req["cron"], now),
    )
    schedule.save(force_insert=True)
    return ok(schedule=schedule.to_record())


def schedule_delete(req, now):
    """S-03: promises it already created are left alone."""
    deleted, _ = Schedule.objects.filter(pk=req["id"]).delete()
    if not deleted:
        return SCHEDULE_NOT_FOUND
    return ok()


def schedule_search(req, now):
    """S-04 is a stub in the spec; decision D5: filter by promiseTags, page by id."""
    schedules = tagged(Schedule.objects.all(), "promise_tags", req["tags"])
    rows, cursor = page(schedules, req.get("cursor"), req["limit"])
    return searched("schedules", [s.to_record() for s in rows], cursor)
