"""manage.py prune: retention. Deletes promises settled long ago, with their task, callbacks, listeners and messages.

Maintenance, not a protocol transition: a settled promise never changes again, so removing it and the rows
keyed by its id cannot strand a pending one (a later create of the same id makes a new promise). Only the
stored state counts: a pending promise is never pruned, even when it reads as timed out (its timeout
transition has not run yet).
"""

from collections import Counter

from django.core.management.base import CommandError

from floor.transactions import Busy, run_atomically
from outbox.models import Message
from promises.models import Callback, Listener, Promise, PromiseState
from resonate_site.management.cli import ResonateCommand, iso, moment, plural, positive
from tasks.models import Task

ORIGIN = "resonate:origin"
TABLES = {Promise: "promises", Task: "tasks", Callback: "callbacks", Listener: "listeners", Message: "messages"}


def prunable(when):
    """Promises whose stored state is settled, and settled before `when` (ms)."""
    return Promise.objects.exclude(state=PromiseState.PENDING).filter(settled_at__lt=when)


def kept(rows):
    """The ids among (id, tags) rows to keep for now: their workflow's root promise is still pending (a replay
    would miss them), or a message about them still waits for delivery."""
    roots = {tags.get(ORIGIN) for _, tags in rows} - {None}
    running = set(Promise.objects.filter(pk__in=roots, state=PromiseState.PENDING).values_list("pk", flat=True))
    messages = Message.objects.undelivered().filter(subject__in=[id for id, _ in rows])
    waiting = set(messages.values_list("subject", flat=True))
    return {id for id, tags in rows if tags.get(ORIGIN) in running or id in waiting}


def prune(rows, when):
    """Delete one batch of promises with everything keyed by their ids (in the caller's transaction).

    Returns ({label: rows deleted}, how many promises were kept).
    """
    keep = kept(rows)
    ids = [id for id, _ in rows if id not in keep]
    _, messages = Message.objects.filter(subject__in=ids).delete()
    _, cascaded = prunable(when).filter(pk__in=ids).delete()  # the task, callbacks and listeners by CASCADE
    return Counter(messages) + Counter(cascaded), len(keep)


def dry_prune(rows, when):
    keep = kept(rows)
    return Counter({Promise._meta.label: len(rows) - len(keep)}), len(keep)


def next_batch(candidates, last, size):
    """(id, tags) of the next `size` candidates after id `last`, by id."""
    after = candidates if last is None else candidates.filter(pk__gt=last)
    return list(after.values_list("id", "tags")[:size])


class Command(ResonateCommand):
    help = "Delete promises settled before a time, with their tasks, callbacks, listeners and messages."

    def add_arguments(self, parser):
        parser.add_argument(
            "--settled-before", type=moment, required=True, help="a time: 30d (ago), an ISO date, or a ms timestamp"
        )
        parser.add_argument("--batch", type=positive, default=1000, help="promises per transaction (default 1000)")
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
        self.add_output_arguments(parser, progress=True)

    def handle(self, *args, settled_before, batch, dry_run, json, **options):
        candidates = prunable(settled_before).order_by("pk")
        deleted, kept_count, last = Counter(), 0, None
        with self.progress(options, total=candidates.count(), desc="prune", unit=" promises") as bar:
            while rows := next_batch(candidates, last, batch):
                try:
                    batch_deleted, batch_kept = run_atomically(dry_prune if dry_run else prune, rows, settled_before)
                except Busy:
                    raise CommandError("The database stayed busy; nothing more was pruned. Try again.") from None
                deleted += batch_deleted
                kept_count += batch_kept
                last = rows[-1][0]
                bar.update(len(rows))
        counts = {name: deleted[model._meta.label] for model, name in TABLES.items()}
        self.report(counts, kept_count, settled_before, dry_run, json)

    def report(self, counts, kept_count, when, dry_run, json):
        if json:
            self.write_json({"settledBefore": when, "dryRun": dry_run, "deleted": counts, "kept": kept_count})
            return
        others = ", ".join(f"{n} {name}" for name, n in counts.items() if name != "promises")
        verb = "Would prune" if dry_run else "Pruned"
        detail = "" if dry_run else f" ({others})"
        self.stdout.write(f"{verb} {plural(counts['promises'], 'promise')} settled before {iso(when)}{detail}.")
        if kept_count:
            self.stdout.write(f"Kept {kept_count}: their workflow is still running, or a message awaits delivery.")
