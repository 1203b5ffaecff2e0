"""setMessage: put an execute or unblock message in the outbox (replacing one with the same key); it is
delivered once the transaction commits."""

from outbox.dispatch import announce
from outbox.models import Message, MessageKind


def set_execute(address, task, now):
    data = {"task": {"id": task.id, "version": task.version}}
    announce(Message.objects.set_message(MessageKind.EXECUTE, task.id, address, data, now))


def set_executes(executes, now):
    """execute(id, version) to each address, for (address, task id, version) triples: one statement for all."""
    announce(
        *Message.objects.set_messages(
            [
                (MessageKind.EXECUTE, id, address, {"task": {"id": id, "version": version}})
                for address, id, version in executes
            ],
            now,
        )
    )


def set_unblocks(unblocks, now):
    """unblock(record) to each address, for (address, promise record) pairs: one statement for all."""
    announce(
        *Message.objects.set_messages(
            [(MessageKind.UNBLOCK, record["id"], address, {"promise": record}) for address, record in unblocks], now
        )
    )
