"""The checker on small histories made by hand: it must accept what has an order and refuse what has none."""

import pytest

from tests.conformance.model import SpecModel
from tests.linearizability.checker import (
    Op,
    Undecided,
    check,
    dumps,
    explain,
    linearizable,
    loads,
    named_ids,
    partition,
    search,
    shrink,
)

NOW = 1_000_000
TARGET = "poll://any@g"
LATER = NOW + 60_000


def replies(*requests):
    """What the model answers to these requests, run one after the other from an empty state."""
    model = SpecModel()
    return [model.handle(kind, data, NOW, "lin") for kind, data in requests]


def op(client, kind, data, start, end=None, answer=None):
    """An op sent at `start` and answered at `end` (ms) with `answer`; no `end`: its outcome is unknown."""
    status, reply = answer if answer is not None else (None, None)
    return Op(
        client=client,
        kind=kind,
        data=data,
        now=NOW,
        invoked=start * 1_000_000,
        returned=None if end is None else end * 1_000_000,
        status=status,
        reply=reply,
        keys=frozenset(named_ids(kind, data)),
    )


def create(id, data="eA==", tags=None):
    return {"id": id, "timeoutAt": LATER, "param": {"data": data}, "tags": tags or {}}


def targeted(id):
    return create(id, tags={"resonate:target": TARGET})


def acquire(id, version, pid):
    return {"id": id, "version": version, "pid": pid, "ttl": 30_000}


def test_two_overlapping_creates_of_one_id_may_both_return_either_ones_params():
    (x,) = replies(("promise.create", create("p", "eA==")))
    history = [
        op("a", "promise.create", create("p", "eA=="), 0, 10, x),
        op("b", "promise.create", create("p", "eQ=="), 5, 15, x),
    ]
    assert linearizable(history)


def test_a_create_that_returned_before_another_began_is_the_one_both_see():
    (x,) = replies(("promise.create", create("p", "eA==")))
    (y,) = replies(("promise.create", create("p", "eQ==")))
    history = [
        op("a", "promise.create", create("p", "eA=="), 0, 10, x),
        op("b", "promise.create", create("p", "eQ=="), 20, 30, y),
    ]
    assert not linearizable(history)


def test_two_workers_cannot_both_acquire_one_version():
    created, first = replies(("promise.create", targeted("t")), ("task.acquire", acquire("t", 0, "w1")))
    _, second = replies(("promise.create", targeted("t")), ("task.acquire", acquire("t", 0, "w2")))
    history = [
        op("a", "promise.create", targeted("t"), 0, 1, created),
        op("w1", "task.acquire", acquire("t", 0, "w1"), 2, 10, first),
        op("w2", "task.acquire", acquire("t", 0, "w2"), 3, 11, second),
    ]
    assert not linearizable(history)
    history[2] = op("w2", "task.acquire", acquire("t", 0, "w2"), 3, 11, (409, None))
    assert linearizable(history)


def test_an_op_without_a_reply_may_take_effect_after_it_was_sent_or_never():
    created, pending, settled = replies(
        ("promise.create", create("p")), ("promise.get", {"id": "p"}), ("promise.settle", settle("p"))
    )
    (_, resolved) = replies(("promise.create", create("p")), ("promise.settle", settle("p")))
    history = [
        op("a", "promise.create", create("p"), 0, 1, created),
        op("b", "promise.settle", settle("p"), 2),  # cut off: no reply
        op("c", "promise.get", {"id": "p"}, 3, 4, pending),
    ]
    assert linearizable(history)  # never, or after the get
    history.append(op("c", "promise.get", {"id": "p"}, 5, 6, resolved))
    assert linearizable(history)  # between the two gets
    history.append(op("c", "promise.get", {"id": "p"}, 7, 8, pending))
    assert not linearizable(history)  # a settlement cannot be undone


def test_an_op_without_a_reply_cannot_take_effect_before_it_was_sent():
    created, settled = replies(("promise.create", create("p")), ("promise.settle", settle("p")))
    history = [
        op("a", "promise.create", create("p"), 0, 1, created),
        op("c", "promise.get", {"id": "p"}, 2, 3, settled),
        op("b", "promise.settle", settle("p"), 4),
    ]
    assert not linearizable(history)


def test_a_read_that_begins_after_a_write_returned_sees_it():
    created, settled, got = replies(
        ("promise.create", create("p")), ("promise.settle", settle("p")), ("promise.get", {"id": "p"})
    )
    (_, pending) = replies(("promise.create", create("p")), ("promise.get", {"id": "p"}))
    assert linearizable(
        [
            op("a", "promise.create", create("p"), 0, 1, created),
            op("a", "promise.settle", settle("p"), 2, 5, settled),
            op("b", "promise.get", {"id": "p"}, 3, 4, pending),  # overlaps the settle: may come first
        ]
    )
    assert not linearizable(
        [
            op("a", "promise.create", create("p"), 0, 1, created),
            op("a", "promise.settle", settle("p"), 2, 3, settled),
            op("b", "promise.get", {"id": "p"}, 4, 5, pending),
        ]
    )
    assert got[1]["promise"]["state"] == "resolved"


def test_a_settlement_resumes_its_awaiter_across_keys():
    """w waits on c; c is settled; a task.get of w that starts after that must show w pending again (resumed)."""
    setup = [
        ("promise.create", targeted("w")),
        ("promise.create", create("c")),
        ("task.acquire", acquire("w", 0, "w1")),
        ("task.suspend", suspend("w", 1, "c")),
    ]
    *answers, settled, resumed = replies(*setup, ("promise.settle", settle("c")), ("task.get", {"id": "w"}))
    *_, suspended = replies(*setup, ("task.get", {"id": "w"}))
    history = [
        op("a", kind, data, 2 * n, 2 * n + 1, answer)
        for n, ((kind, data), answer) in enumerate(zip(setup, answers, strict=True))
    ]
    history.append(op("b", "promise.settle", settle("c"), 10, 11, settled))
    assert linearizable([*history, op("c", "task.get", {"id": "w"}, 12, 13, resumed)])
    assert resumed[1]["task"]["state"] == "pending" and suspended[1]["task"]["state"] == "suspended"
    late = [*history, op("c", "task.get", {"id": "w"}, 12, 13, suspended)]
    assert len(partition(late)) == 1  # the suspend ties w and c together
    assert not linearizable(late)


def test_independent_keys_are_checked_apart():
    (x,) = replies(("promise.create", create("p")))
    (y,) = replies(("promise.create", create("q")))
    history = [op("a", "promise.create", create("p"), 0, 1, x), op("b", "promise.create", create("q"), 0, 1, y)]
    outcome = check(history)
    assert outcome.partitions == 2 and outcome.linearizable


def test_a_violation_shrinks_to_the_few_ops_that_show_it():
    """Noise around a lost settlement (a get after the settle returned still sees it pending) is shrunk away."""
    created, settled = replies(("promise.create", create("p")), ("promise.settle", settle("p")))
    _, pending = replies(("promise.create", create("p")), ("promise.get", {"id": "p"}))
    _, other = replies(("promise.create", create("p")), ("promise.create", create("p", "eQ==")))
    history = [op("a", "promise.create", create("p"), 0, 1, created)]
    for n in range(6):  # overlapping reads and idempotent creates, all consistent with the settle coming late
        history.append(op(f"r{n}", "promise.get", {"id": "p"}, 2 + n, 40, pending))
        history.append(op(f"c{n}", "promise.create", create("p", "eQ=="), 2 + n, 40, other))
    history.append(op("s", "promise.settle", settle("p"), 50, 51, settled))
    history.append(op("g", "promise.get", {"id": "p"}, 60, 61, pending))
    history.append(op("h", "promise.get", {"id": "p"}, 70, 71, pending))
    assert not linearizable(history)

    witness = shrink(history)

    assert not linearizable(witness)
    assert [o.kind for o in witness] == ["promise.create", "promise.settle", "promise.get"]
    assert witness[0].known is False  # its reply does not matter to the violation, only its effect
    text = explain(witness)
    assert "the server said 200" in text and '"state":"pending"' in text and '"state":"resolved"' in text


def test_a_search_past_its_budget_is_undecided_never_passed():
    created, *_ = replies(("promise.create", create("p")))
    history = [op("a", "promise.create", create("p"), 0, 1, created)]
    history += [op(f"s{n}", "promise.settle", settle("p", "rejected"), 2) for n in range(12)]
    history.append(op("g", "promise.get", {"id": "p"}, 3, 4, (404, None)))
    with pytest.raises(Undecided):
        search(history, budget=50)
    assert not check(history, budget=50).linearizable


def settle(id, state="resolved"):
    return {"id": id, "state": state, "value": {"data": "eg=="}}


def suspend(id, version, *awaited):
    actions = [
        {"kind": "promise.register_callback", "head": {}, "data": {"awaited": a, "awaiter": id}} for a in awaited
    ]
    return {"id": id, "version": version, "actions": actions}


def test_reads_overlapping_a_write_may_see_before_and_after_it():
    created, pending, settled, resolved = replies(
        ("promise.create", create("p")),
        ("promise.get", {"id": "p"}),
        ("promise.settle", settle("p")),
        ("promise.get", {"id": "p"}),
    )
    history = [
        op("a", "promise.create", create("p"), 0, 1, created),
        op("r1", "promise.get", {"id": "p"}, 2, 10, resolved),  # sent first, answered after the settle
        op("w", "promise.settle", settle("p"), 3, 9, settled),
        op("r2", "promise.get", {"id": "p"}, 4, 8, pending),
    ]
    assert linearizable(history)
    history.append(op("r3", "promise.get", {"id": "p"}, 11, 12, pending))
    assert not linearizable(history)


def test_an_op_without_a_reply_that_changes_nothing_wherever_it_goes_is_shrunk_away():
    created, _ = replies(("promise.create", create("p")), ("promise.settle", settle("p")))
    (_, pending) = replies(("promise.create", create("p")), ("promise.get", {"id": "p"}))
    _, settled = replies(("promise.create", create("p")), ("promise.settle", settle("p")))
    history = [
        op("a", "promise.create", create("p"), 0, 1, created),
        op("b", "promise.create", create("p", "eQ=="), 2),  # cut off, after p was shown to exist: a no-op
        op("c", "promise.settle", settle("p"), 3, 4, settled),
        op("d", "promise.get", {"id": "p"}, 5, 6, pending),
    ]
    assert [o.client for o in shrink(history)] == ["a", "c", "d"]


def test_a_saved_history_reads_back_as_it_was():
    created, _ = replies(("promise.create", create("p")), ("promise.settle", settle("p")))
    history = [op("a", "promise.create", create("p"), 0, 1, created), op("b", "promise.settle", settle("p"), 2)]
    again = loads(dumps(history))
    assert [vars(o) for o in again] == [vars(o) for o in history]
