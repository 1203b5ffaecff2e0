"""floor.batching.Together: the items of threads that come while a statement is in flight go together in the next,
a thread alone goes at once, one key never twice in a statement, and every thread hears its outcome, errors too."""

import threading
import time

import pytest

from floor import batching
from floor.batching import Together


class Sender:
    """A send that records each statement's items and answers each item with its own text; the statements whose
    first item is in `held` wait until release(item) lets them go."""

    def __init__(self, held=(), answer=None):
        self.sent, self.held, self.answer = [], {item: threading.Event() for item in held}, answer

    def __call__(self, shape, items):
        self.sent.append(list(items))
        if items[0] in self.held:
            assert self.held[items[0]].wait(10)
        if self.answer is not None:
            return self.answer(items)
        return [f"{shape}:{item}" for item in items]

    def release(self, item):
        self.held[item].set()


def eventually(check, timeout=10):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within 10 s"
        time.sleep(0.005)


class Threads:
    """Threads calling together.run(shape, key, item), started one at a time, each once the one before it is in."""

    def __init__(self, together, shape="s"):
        self.together, self.shape, self.outcomes, self.threads = together, shape, {}, []

    def start(self, key, item, settled=None):
        def run():
            self.outcomes[item] = self.together.run(self.shape, key, item)

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)
        if settled is not None:
            eventually(settled)

    def waiting(self, count):
        return lambda: len(self.together.waiting.get(self.shape, ())) == count

    def join(self):
        for thread in self.threads:
            thread.join(10)
            assert not thread.is_alive()


def a_alone_then_b_and_c(sender):
    """Item a sent alone and held there; b and c come meanwhile, wait, and go together once a is back."""
    threads = Threads(Together(sender))
    threads.start("a", "a", settled=lambda: sender.sent)
    threads.start("b", "b", settled=threads.waiting(1))
    threads.start("c", "c", settled=threads.waiting(2))
    sender.release("a")
    threads.join()
    return threads


def test_a_thread_alone_sends_its_item_at_once_and_alone():
    sender = Sender()
    together = Together(sender)

    assert together.run("s", "k", "a") == "s:a"
    assert together.run("s", "k", "b") == "s:b"
    assert sender.sent == [["a"], ["b"]]


def test_items_that_come_while_a_statement_is_in_flight_go_together_in_the_next(monkeypatch):
    monkeypatch.setattr(batching, "IN_FLIGHT", 1)
    sender = Sender(held=["a"])
    threads = Threads(Together(sender))

    threads.start("a", "a", settled=lambda: sender.sent)
    for n, item in enumerate("bcd", 1):
        threads.start(item, item, settled=threads.waiting(n))
    sender.release("a")
    threads.join()

    assert sender.sent == [["a"], ["b", "c", "d"]]  # the first that waited leads, the others in the order they came
    assert threads.outcomes == {item: f"s:{item}" for item in "abcd"}


def test_a_second_statement_goes_out_while_the_first_is_in_flight_once_enough_are_waiting():
    sender = Sender(held=["a", "d"])
    threads = Threads(Together(sender))

    threads.start("a", "a", settled=lambda: sender.sent)
    threads.start("b", "b", settled=threads.waiting(1))
    threads.start("c", "c", settled=threads.waiting(batching.SECOND_AT))
    threads.start("d", "d", settled=lambda: len(sender.sent) == 2)  # SECOND_AT waiting: it leads them out
    threads.start("e", "e", settled=threads.waiting(1))  # two in flight (IN_FLIGHT): it waits
    sender.release("a")
    sender.release("d")
    threads.join()

    assert sender.sent == [["a"], ["d", "b", "c"], ["e"]]
    assert threads.outcomes == {item: f"s:{item}" for item in "abcde"}
    assert threads.together.in_flight == {"s": 0}


def test_two_items_of_one_key_never_go_in_one_statement(monkeypatch):
    monkeypatch.setattr(batching, "IN_FLIGHT", 1)
    sender = Sender(held=["a"])
    threads = Threads(Together(sender))

    threads.start("a", "a", settled=lambda: sender.sent)
    threads.start("x", "x1", settled=threads.waiting(1))
    threads.start("x", "x2", settled=threads.waiting(2))
    threads.start("y", "y", settled=threads.waiting(3))
    sender.release("a")
    threads.join()

    assert sender.sent == [["a"], ["x1", "y"], ["x2"]]


def test_statements_of_other_shapes_do_not_wait_for_each_other():
    sender = Sender(held=["a"])
    together = Together(sender)
    first = Threads(together, "s")

    first.start("a", "a", settled=lambda: sender.sent)
    assert together.run("t", "b", "b") == "t:b"  # another shape: sent at once
    sender.release("a")
    first.join()


def test_an_error_of_a_statement_is_the_outcome_of_each_of_its_items(monkeypatch):
    monkeypatch.setattr(batching, "IN_FLIGHT", 1)
    failure = ValueError("refused")

    def answer(items):
        if len(items) > 1:
            raise failure
        return ["fine"]

    threads = a_alone_then_b_and_c(Sender(held=["a"], answer=answer))

    assert threads.outcomes == {"a": "fine", "b": failure, "c": failure}


@pytest.mark.parametrize("answer", [lambda items: ["one"], lambda items: None], ids=["too few", "none"])
def test_a_send_that_answers_for_the_wrong_number_of_items_leaves_nobody_waiting(monkeypatch, answer):
    monkeypatch.setattr(batching, "IN_FLIGHT", 1)
    threads = a_alone_then_b_and_c(
        Sender(held=["a"], answer=lambda items: ["fine"] if items == ["a"] else answer(items))
    )

    assert threads.outcomes["a"] == "fine"
    assert isinstance(threads.outcomes["b"], Exception) and threads.outcomes["b"] is threads.outcomes["c"]
    assert threads.together.waiting == {"s": []} and threads.together.in_flight == {"s": 0}  # nothing left behind


def test_a_thread_left_waiting_too_long_goes_alone_and_its_item_is_sent_by_no_statement(monkeypatch):
    monkeypatch.setattr(batching, "IN_FLIGHT", 1)
    monkeypatch.setattr(batching, "WAIT_S", 0.05)
    sender = Sender(held=["a"])
    threads = Threads(Together(sender, alone="alone"))

    threads.start("a", "a", settled=lambda: sender.sent)
    threads.start("b", "b", settled=lambda: "b" in threads.outcomes)  # a still in flight: b gives up waiting
    sender.release("a")
    threads.join()

    assert threads.outcomes == {"a": "s:a", "b": "alone"}
    assert sender.sent == [["a"]]
    assert threads.together.waiting == {"s": []} and threads.together.in_flight == {"s": 0}
