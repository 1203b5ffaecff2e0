"""setMessage: put an execute or unblock message in the outbox (replacing one with the same key); it is
delivered once the transaction commits."""

from floor import rows
from outbox.dispatch import announce, claim_if_sent_here
from outbox.models import Message, MessageKind


def message(kind, subject, address, data, now):
    """A new message, unsaved. When this process will send it as soon as it is committed, it is claimed for
    this process as it is written (outbox.delivery.claim_on_write): no claim statement after the commit; and when
    no stream can take it now, its attempt is recorded as it is written, with nothing to send after the commit."""
    built = Message.build(kind, subject, address, data, now)
    claim_if_sent_here(built)
    return built


def execute(address, task, now):
    """execute(task, version) to an address, unsaved: for a row stored with it (a new task's)."""
    return message(MessageKind.EXECUTE, task.id, address, {"task": {"id": task.id, "version": task.version}}, now)


def set_messages(messages):
    """Store messages (each replacing the one with its key), one statement for all; delivered after the commit."""
    Message.objects.store(messages)
    announce(*messages)


def set_execute(address, task, now):
    set_messages([execute(address, task, now)])


def set_executes(executes, now):
    """execute(id, version) to each address, for (address, task id, version) triples."""
    set_messages(
        [
            message(MessageKind.EXECUTE, id, address, {"task": {"id": id, "version": version}}, now)
            for address, id, version in executes
        ]
    )


def set_unblocks(unblocks, now):
    """unblock(record) to each address, for (address, promise record) pairs: written with the commit on PostgreSQL
    (rows.at_commit), as nothing after them in a settlement reads them."""
    if unblocks:
        unblocked = [
            message(MessageKind.UNBLOCK, record["id"], address, {"promise": record}, now)
            for address, record in unblocks
        ]
        rows.at_commit([setting_messages(unblocked)])


def setting_messages(messages):
    """set_messages as a Statement, for rows.run_all with the transaction's other writes; delivered after the
    commit (the announcement is dropped if the transaction rolls back)."""
    announce(*messages)
    return Message.objects.storing(messages)
