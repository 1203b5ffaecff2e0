"""setMessage: put an execute or unblock message in the outbox (replacing one with the same key); it is
delivered once the transaction commits."""

from outbox.dispatch import announce
from outbox.models import Message, MessageKind


def execute(address, task, now):
    """The execute(task, version) message to an address, unsaved: for a row stored with it (a new task's)."""
    return Message.build(MessageKind.EXECUTE, task.id, address, {"task": {"id": task.id, "version": task.version}}, now)


def set_execute(address, task, now):
    set_executes([(address, task.id, task.version)], now)


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
