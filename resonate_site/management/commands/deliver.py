"""manage.py deliver: send the outbox messages that are due, once or in a loop like the embedded deliverer."""

from floor.conf import resonate_settings
from floor.loops import keep_running
from outbox.delivery import Transport, deliver_due
from outbox.models import Pause
from resonate_site.management.cli import ResonateCommand, duration, plural, stopped_by_signals


def keep_delivering(seconds, stopping, only=None):
    """deliver_due every DELIVERY_PASS_MS for `seconds` or until `stopping()`; how many messages it attempted."""
    period = resonate_settings.DELIVERY_PASS_MS / 1000

    def delivering():
        return (0 if Pause.is_paused() else deliver_due(only)), period

    return keep_running(delivering, seconds, stopping, retry_after=period)


class Command(ResonateCommand):
    help = (
        "Deliver due outbox messages (execute, unblock). poll:// messages reach streams of other processes only"
        " through a shared hub (RESONATE_HUB_URL=redis://…)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep delivering, until SIGTERM")
        parser.add_argument("--stop-after", type=duration, help="with --loop: stop after this long (e.g. 10m)")
        self.add_output_arguments(parser)

    def handle(self, *args, loop, stop_after, json, **options):
        # Without a shared hub no poll:// stream is reachable from here: trying those messages would only
        # drop them (an unblock is never sent again), so they are left to the server that holds the streams.
        only = None if resonate_settings.HUB_URL else Transport.PUSH
        if only:
            self.notice("RESONATE_HUB_URL is not set: only http(s):// messages are delivered; poll:// ones are left.")
        if loop:
            with stopped_by_signals() as stopping:
                seconds = float("inf") if stop_after is None else stop_after / 1000
                sent = keep_delivering(seconds, stopping, only)
        elif Pause.is_paused():
            self.notice("Background work is paused (debug.start): nothing delivered.")
            sent = 0
        else:
            sent = deliver_due(only)
        if json:
            self.write_json({"attempted": sent})
        else:
            self.stdout.write(f"Attempted {plural(sent, 'message')}.")
