"""setMessage: put an execute or unblock message in the outbox (replacing one with the same key); it is
delivered once the transaction commits."""

from outbox.dispatch import announce
from outbox.models import Message, MessageKind


def set_execute(address, task, now):
    data = {"task": {"id": task.id, "version": task.version}}
    announce(Message.objects.set_message(MessageKind.EXECUTE, task.id, address, data, now))


def set_unblock(address, record, now):
    announce(Message.objects.set_message(MessageKind.UNBLOCK, record["id"], address, {"promise": record}, now))
