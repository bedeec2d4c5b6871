"""A read-write lock's writer that waits by several calls keeps new readers
out between its calls too (AcquireRWRequest.intent), until it gets in or
gives up, against a real service over its embedded store."""

import threading
import time
import uuid

import pytest

import distlock
from conftest import TOKENS


def key():
    return "py-rw-intent/" + uuid.uuid4().hex


class Recorder:
    """Records a client's AcquireRW and WithdrawIntent calls: the bodies
    sent, and, after each refused AcquireRW of a writer (in the pause
    before its next call), whether probe() got in."""

    def __init__(self, client, probe=None):
        self.sent, self.withdrawn, self.probes = [], [], []
        self.refused = threading.Event()
        unary = client._t.unary

        def record(method, body, timeout=None):
            if method == "AcquireRW":
                self.sent.append(dict(body))
            elif method == "WithdrawIntent":
                self.withdrawn.append(dict(body))
            try:
                return unary(method, body, timeout)
            except distlock.NotAcquired:
                if method == "AcquireRW" and body.get("write"):
                    self.refused.set()
                    if probe is not None:
                        self.probes.append(probe())
                raise

        client._t.unary = record


def test_waiting_writer_keeps_readers_out_between_calls(monkeypatch, clients):
    # The writer waits in calls of 0.3 s while a reader holds. Between two
    # of its calls (where the service's own wait no longer keeps readers
    # out) a new reader tries, and is refused; the writer gets in once the
    # reader leaves, every call with the one intent.
    monkeypatch.setattr(distlock.client, "MAX_CALL_WAIT", 0.3)
    holder, writer, reader = clients
    name = key()
    r1 = holder.rwlock(name).read_lock()

    def probe():
        try:
            reader.rwlock(name).read_lock(wait=0).release()
            return "got in"
        except distlock.NotAcquired:
            return "kept out"

    calls = Recorder(writer, probe)
    got = {}

    def wait_to_write():
        try:
            got["w"] = writer.rwlock(name).write_lock(wait=20)
        except Exception as e:  # noqa: BLE001 - checked below
            got["err"] = e

    t = threading.Thread(target=wait_to_write)
    t.start()
    try:
        deadline = time.monotonic() + 5  # three refused calls, at 0.3 s each
        while len(calls.probes) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        r1.release()
        t.join(10)
    assert not t.is_alive(), "the writer did not get in within 10 s of the release"
    assert "err" not in got, got.get("err")
    assert len(calls.probes) >= 3 and set(calls.probes) == {"kept out"}, calls.probes
    assert len(calls.sent) >= 4 and all(c["write"] for c in calls.sent)
    intents = {c.get("intent") for c in calls.sent}
    assert len(intents) == 1 and None not in intents, intents  # one intent, on every call
    assert calls.withdrawn == []  # granted: nothing to withdraw
    w = got["w"]
    assert w.fence > r1.fence
    writer_holds, held, _ = holder.rwlock(name).inspect()
    assert writer_holds and len(held) == 1
    assert w.release()
    reader.rwlock(name).read_lock(wait=0).release()


def test_a_writer_that_gives_up_withdraws(monkeypatch, clients):
    # Refused, a writer's call with an intent keeps new readers out for 2 s;
    # the client withdraws it when its wait ends, so a reader gets in at once.
    monkeypatch.setattr(distlock.client, "MAX_CALL_WAIT", 0.3)
    holder, writer, reader = clients
    name = key()
    r1 = holder.rwlock(name).read_lock()
    calls = Recorder(writer)
    start = time.monotonic()
    with pytest.raises(distlock.NotAcquired):
        writer.rwlock(name).write_lock(wait=0.7)
    assert 0.6 < time.monotonic() - start < 5
    assert len(calls.sent) >= 2
    intent = calls.sent[0]["intent"]
    assert all(c["intent"] == intent for c in calls.sent)
    assert calls.withdrawn == [{"name": name, "intent": intent}]
    reader.rwlock(name).read_lock(wait=0).release()  # not kept out

    # A writer's try sends no intent, and keeps nobody out; nor does a
    # reader's wait.
    calls.sent.clear()
    with pytest.raises(distlock.NotAcquired):
        writer.rwlock(name).write_lock(wait=0)
    assert "intent" not in calls.sent[0]
    writer.rwlock(name).read_lock(wait=0.5).release()
    assert all("intent" not in c for c in calls.sent)
    reader.rwlock(name).read_lock(wait=0).release()
    assert calls.withdrawn == [{"name": name, "intent": intent}]
    r1.release()

    # lock_path takes its node as a writer: a table's lock that gives up
    # while a row is held lets new rows in at once.
    table = key()
    row = holder.lock_path([table, table + "/1"])
    calls.sent.clear()
    with pytest.raises(distlock.NotAcquired):
        writer.lock_path([table], wait=0.5)
    assert len(calls.sent) >= 2 and calls.withdrawn[-1] == {"name": table, "intent": calls.sent[0]["intent"]}
    reader.lock_path([table, table + "/2"], wait=0).release()
    row.release()
