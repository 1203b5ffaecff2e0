"""manage.py sweep: fire every due timeout transition once, or keep sweeping like the embedded sweeper."""

from floor.clock import now_ms
from floor.conf import resonate_settings
from outbox.models import Pause
from resonate_site.management.cli import ResonateCommand, duration, plural, stopped_by_signals
from timeouts.sweep import sweep
from timeouts.sweeper import keep_sweeping


class Command(ResonateCommand):
    help = "Fire due timeouts (promise timeouts, task retries and leases, schedules) in order (decision D15)."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping as timeouts come due, until SIGTERM")
        parser.add_argument("--stop-after", type=duration, help="with --loop: stop after this long (e.g. 10m)")
        self.add_output_arguments(parser)

    def handle(self, *args, loop, stop_after, json, **options):
        if loop:
            with stopped_by_signals() as stopping:
                fired = keep_sweeping(float("inf") if stop_after is None else stop_after / 1000, stopping)
        elif Pause.is_paused():
            self.notice("Background work is paused (debug.start): nothing swept.")
            fired = 0
        else:
            fired = sweep(now_ms(), batch=resonate_settings.SWEEP_BATCH)  # what is due now, once
        if json:
            self.write_json({"fired": fired})
        else:
            self.stdout.write(f"Fired {plural(fired, 'timeout transition')}.")
