"""The outbox: execute and unblock messages committed with the state change that caused them."""

from django.db import connection, models, transaction
from django.db.models import Q

from floor import rows
from floor.protocol import IdField


class MessageKind(models.TextChoices):
    EXECUTE = "execute"
    UNBLOCK = "unblock"


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    DROPPED = "dropped"  # nobody to deliver to (e.g. no live poll connection); execute is re-sent by timers
    FAILED = "failed"  # delivery attempts exhausted


def message_key(kind, subject, address):
    """The spec's outbox key: execute is keyed by task id, unblock by promise id and address.

    A new message with the same key replaces the old one (setMessage). The length prefix keeps
    any id/address pair from colliding with another.
    """
    if kind == MessageKind.EXECUTE:
        return f"e:{subject}"
    return f"u:{len(subject)}:{subject}{address}"


# setMessage replaces everything but the key: the new message is delivered afresh.
REPLACED_ON_SET = (
    "address",
    "data",
    "created_at",
    "state",
    "attempts",
    "next_attempt_at",
    "delivered_at",
    "unreached_since",
    "last_error",
)


class MessageQuerySet(models.QuerySet):
    def undelivered(self):
        return self.filter(state=DeliveryState.PENDING)

    def redeliver(self, keys, now):
        """An operator's retry: these messages, unless delivered already, go out again with fresh attempts."""
        again = self.filter(key__in=keys).exclude(state=DeliveryState.DELIVERED)
        keys = list(again.values_list("key", flat=True))
        self.filter(key__in=keys).update(
            state=DeliveryState.PENDING,
            attempts=0,
            next_attempt_at=now,
            created_at=now,
            unreached_since=None,
            last_error="",
        )
        return keys

    def store(self, messages):
        """setMessage for unsaved messages with distinct keys: each replaces the one with its key (one statement)."""
        rows.insert_all(messages, on_conflict=Message.insert_on_conflict)

    def storing(self, messages):
        """store() as a Statement, for rows.run_all."""
        return rows.inserting(messages, on_conflict=Message.insert_on_conflict)


class Message(models.Model):
    key = models.TextField()  # unique: message_key (a constraint, not unique=True, which adds an index for LIKE)
    kind = models.CharField(max_length=7, choices=MessageKind.choices)
    subject = IdField(help_text="The task id of an execute, the promise id of an unblock.")
    address = models.TextField()
    data = models.JSONField()
    created_at = models.BigIntegerField()
    state = models.CharField(max_length=9, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.BigIntegerField(null=True, blank=True)
    delivered_at = models.BigIntegerField(null=True, blank=True)
    unreached_since = models.BigIntegerField(
        null=True, blank=True, help_text="When an attempt first found no stream for this poll:// address."
    )
    last_error = models.TextField(blank=True, default="")

    objects = MessageQuerySet.as_manager()

    # setMessage: a new message replaces the one with the same key (rows.insert's on_conflict).
    insert_on_conflict = ("key", REPLACED_ON_SET)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key"], name="message_key")]
        indexes = [
            # In the order attempts take them (next_attempt_at, then id: outbox.delivery), so that a batch reads no more
            # than itself however many messages are due at the same instant.
            models.Index(
                fields=["next_attempt_at", "id"],
                name="message_attempts",
                condition=Q(state=DeliveryState.PENDING),
            ),
        ]

    def __str__(self):
        return f"{self.kind} {self.subject} → {self.address}"

    @classmethod
    def build(cls, kind, subject, address, data, now):
        """An unsaved message, due now (stored by outbox.messages or with the row that caused it)."""
        key = message_key(kind, subject, address)
        values = {"kind": kind, "subject": subject, "address": address, "data": data}
        return rows.new(cls, key=key, **values, created_at=now, next_attempt_at=now)

    def body(self, server_url=None):
        """The message as workers receive it; execute carries the server's public URL (D14)."""
        head = {"serverUrl": server_url} if server_url is not None and self.kind == MessageKind.EXECUTE else {}
        return {"kind": self.kind, "head": head, "data": self.data}


class Pause(models.Model):
    """One row: whether debug.start has paused the background sweep and delivery."""

    paused = models.BooleanField(default=False)

    def __str__(self):
        return "paused" if self.paused else "running"

    @classmethod
    def set(cls, paused):
        """Pause (debug.start) or resume (debug.stop) the background; returns once a background sweep's batch under
        way has committed (held_paused), so that nothing fires after debug.start has answered. On SQLite that batch
        holds the one writer this write waits for."""
        with transaction.atomic():
            if connection.vendor == "postgresql":
                # EXCLUSIVE conflicts with the ROW SHARE lock a batch's FOR SHARE read takes on the table, whether
                # or not the row exists yet, and lets the deliverers' plain reads (is_paused) through.
                with connection.cursor() as cursor:
                    cursor.execute(f"LOCK TABLE {rows.quote(cls._meta.db_table)} IN EXCLUSIVE MODE")
            cls.objects.update_or_create(pk=1, defaults={"paused": paused})

    @classmethod
    def is_paused(cls):
        """Read by every deliverer ten times a second: a cached statement, not an ORM query compiled each time."""
        return cls._read()

    @classmethod
    def held_paused(cls):
        """is_paused() read inside a background sweep's batch, holding off debug.start's write until that batch
        commits: a batch either commits before debug.start answers, or reads the pause it set and fires nothing."""
        return cls._read(" FOR SHARE" if connection.vendor == "postgresql" else "")

    @classmethod
    def _read(cls, lock=""):
        return bool(rows.query(f'SELECT 1 FROM {rows.quote(cls._meta.db_table)} WHERE "id" = 1 AND "paused"{lock}'))
