"""Holds of several permits (Semaphore.acquire(count=n)) against a real
service over its embedded store: one hold counts n permits, and a waiting call of several
keeps later calls out, between its calls too, until it gets in or gives up."""

import threading
import time
import uuid

import pytest

import distlock
from conftest import TOKENS


def key():
    return "py-weighted/" + uuid.uuid4().hex


class Recorder:
    """Records a client's AcquirePermit and WithdrawPermitIntent calls: the
    bodies sent, and whether one was refused."""

    def __init__(self, client):
        self.sent, self.withdrawn = [], []
        self.refused = threading.Event()
        unary = client._t.unary

        def record(method, body, timeout=None):
            if method == "AcquirePermit":
                self.sent.append(dict(body))
            elif method == "WithdrawPermitIntent":
                self.withdrawn.append(dict(body))
            try:
                return unary(method, body, timeout)
            except distlock.NotAcquired:
                self.refused.set()
                raise

        client._t.unary = record


def count_of(hold):
    return int(hold.get("permits") or 1)  # 0 (left out) means one


def test_hold_of_several_permits(clients):
    a, b, _ = clients
    name = key()
    sem, theirs = a.semaphore(name, 3), b.semaphore(name, 3)
    two = sem.acquire(count=2, lease=1.5, wait=5)
    permits, held = sem.inspect()
    assert permits == 3 and [count_of(h) for h in held] == [2] and int(held[0]["fence"]) == two.fence
    with pytest.raises(distlock.NotAcquired):
        theirs.acquire(count=2, wait=0)  # 1 free
    one = theirs.try_acquire()  # fits beside: a refused try keeps nobody out
    with pytest.raises(distlock.NotAcquired):
        theirs.try_acquire()  # 3 of 3 held
    time.sleep(2)  # past its lease: only the renewals keep the hold of 2
    assert two.held
    assert sorted(count_of(h) for h in sem.inspect()[1]) == [1, 2]
    assert two.release()  # both permits at once
    again = theirs.acquire(count=2, wait=0)
    assert again.fence > one.fence
    for h in (again, one):
        assert h.release()
    assert sem.inspect()[1] == []


def test_large_request_not_starved(monkeypatch, clients):
    # A call of 3 waits in calls of 0.5 s while two singles hold: the free
    # permit goes to no later single, between its calls too; it gets in once
    # the holders leave.
    monkeypatch.setattr(distlock.client, "MAX_CALL_WAIT", 0.5)
    holder, big, small = clients
    name = key()
    h1, h2 = holder.semaphore(name, 3).try_acquire(), holder.semaphore(name, 3).try_acquire()
    calls = Recorder(big)
    got = {}

    def wait_for_three():
        try:
            got["lk"] = big.semaphore(name, 3).acquire(count=3, wait=20)
        except Exception as e:  # noqa: BLE001 - checked below
            got["err"] = e

    t = threading.Thread(target=wait_for_three)
    t.start()
    try:
        assert calls.refused.wait(5), "the call of 3 was not refused within 5 s"
        until = time.monotonic() + 1.5  # three more of its calls, and the pauses between them
        while time.monotonic() < until:
            with pytest.raises(distlock.NotAcquired):
                small.semaphore(name, 3).try_acquire()
            time.sleep(0.02)
    finally:
        h1.release()
        h2.release()
        t.join(10)
    assert "err" not in got, got.get("err")
    lk = got["lk"]
    assert [count_of(h) for h in big.semaphore(name, 3).inspect()[1]] == [3]
    assert len(calls.sent) >= 3 and all(c["count"] == 3 for c in calls.sent)
    intents = {c.get("intent") for c in calls.sent}
    assert len(intents) == 1 and None not in intents, intents  # one intent, on every call
    assert calls.withdrawn == []  # granted: nothing to withdraw
    assert lk.release()
    small.semaphore(name, 3).try_acquire(count=3).release()


def test_a_wait_that_gives_up_withdraws(monkeypatch, clients):
    # Refused, a call with an intent keeps later calls out for 2 s; the
    # client withdraws it when its wait ends, so a single gets in at once.
    monkeypatch.setattr(distlock.client, "MAX_CALL_WAIT", 0.5)
    holder, big, small = clients
    name = key()
    held = holder.semaphore(name, 3).try_acquire()
    calls = Recorder(big)
    start = time.monotonic()
    with pytest.raises(distlock.NotAcquired):
        big.semaphore(name, 3).acquire(count=3, wait=1)
    assert 0.9 < time.monotonic() - start < 5
    assert len(calls.sent) >= 2
    intent = calls.sent[0]["intent"]
    assert calls.withdrawn == [{"name": name, "intent": intent}]
    small.semaphore(name, 3).try_acquire().release()  # not kept out
    held.release()

    # A try of several sends no intent, and keeps nobody out.
    held = holder.semaphore(name, 3).try_acquire()
    calls.sent.clear()
    with pytest.raises(distlock.NotAcquired):
        big.semaphore(name, 3).try_acquire(count=3)
    assert "intent" not in calls.sent[0] and calls.withdrawn == [{"name": name, "intent": intent}]
    small.semaphore(name, 3).try_acquire().release()
    held.release()


def test_bad_count_refused_before_any_call():
    # Nothing listens on port 9: a call would be Unavailable.
    c = distlock.Client("http://127.0.0.1:9", timeout=1)
    sem = c.semaphore(key(), 3)
    for bad in (0, -1, 4, True, 1.5, "2", None):
        with pytest.raises(distlock.InvalidArgument):
            sem.acquire(count=bad)
        with pytest.raises(distlock.InvalidArgument):
            sem.try_acquire(count=bad)
    c.close()
