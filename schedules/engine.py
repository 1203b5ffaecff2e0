"""Schedule machinery: the schedule timeout (02-timeouts.lean) with its catch-up."""

from floor.conf import resonate_settings
from floor.counters import schedule_promises_fired
from floor.protocol import later
from floor.transactions import after_commit
from promises.engine import create
from schedules.cron import NEVER, expand, next_cron
from schedules.models import Schedule


def catch_up(schedule, now):
    """Create the promise of every occurrence up to `now`, each as if created at its own cron time.

    At most SCHEDULE_CATCH_UP_MAX of them in one transition (the specification creates every missed one at once):
    a schedule further behind, after a long outage or a debug.tick far ahead, stays due, and the next sweep goes on
    where this one stopped. Unbounded, an hourly schedule ticked to the year 9999 ran a request for ever."""
    fired, limit = 0, resonate_settings.SCHEDULE_CATCH_UP_MAX
    while schedule.next_run_at <= now and schedule.next_run_at != NEVER and fired < limit:
        cron_time = schedule.next_run_at
        create(  # as promise.create would at the cron time
            expand(schedule.promise_id, schedule.id, cron_time),
            schedule.promise_param,
            schedule.promise_tags,
            later(cron_time, schedule.promise_timeout),
            cron_time,
        )
        schedule.last_run_at = cron_time
        schedule.next_run_at = next_cron(schedule.cron, cron_time)
        fired += 1
    if fired:
        after_commit(schedule_promises_fired, fired)


def on_schedule_timeout(schedule_id, now):
    """A schedule's next run came due (02-timeouts.lean): catch up, and wait for the next run."""
    schedule = Schedule.objects.locked(schedule_id)
    if schedule is None:
        return
    catch_up(schedule, now)
    schedule.save(update_fields=["last_run_at", "next_run_at"])
