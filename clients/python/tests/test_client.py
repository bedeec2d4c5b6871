"""The client against a real lock service."""

import socket
import threading
import time
import uuid

import pytest

import distlock
from conftest import TOKENS


@pytest.fixture
def client(service):
    c = distlock.Client(service, token=TOKENS["alpha"])
    yield c
    c.close()


@pytest.fixture
def other(service):
    c = distlock.Client(service, token=TOKENS["alpha"])
    yield c
    c.close()


def key():
    return "py/" + uuid.uuid4().hex


def test_lock_excludes_and_renews(client, other):
    k = key()
    with client.lock(k, lease=1.5, owner="py-test") as lk:
        assert lk.fence > 0 and lk.token
        time.sleep(3.5)  # past two leases: only the renewals keep it
        assert lk.held and not lk.lost.is_set()
        with pytest.raises(distlock.NotAcquired):
            other.try_lock(k)
        assert other.inspect(k)["owner"] == "py-test"
    again = other.try_lock(k)
    assert again.fence > lk.fence
    assert again.release()
    assert not again.release()  # released once


def test_lock_waits_for_release(client, other):
    k = key()
    first = client.lock(k, lease=30)
    threading.Timer(0.5, first.release).start()
    start = time.monotonic()
    second = other.lock(k, lease=30, wait=10)
    assert 0.4 < time.monotonic() - start < 5
    assert second.fence > first.fence
    second.release()
    with pytest.raises(distlock.NotAcquired):
        held = client.lock(k, lease=30)
        try:
            other.lock(k, wait=0.3)
        finally:
            held.release()


def test_loss_is_told(service, client):
    k = key()
    lost = threading.Event()
    lk = client.lock(k, lease=1.5, on_lost=lambda _: lost.set())
    admin = distlock.Client(service, token=TOKENS["admin"])
    try:
        removed = admin.force_release(k, "the Python client's test")
        assert removed["held"] and int(removed["fence"]) == lk.fence
        assert not admin.force_release(k, "again").get("held")  # free now: nothing removed
        with pytest.raises(distlock.PermissionDenied):
            client.force_release(k, "a client may not")
    finally:
        admin.close()
    assert lost.wait(5), "the holder was not told within 5s"
    assert lk.lost.is_set() and "taken" in lk.lost_reason
    assert not lk.release()


def test_errors(service, client):
    with pytest.raises(distlock.InvalidArgument):
        client.try_lock("bad\x00key")
    with pytest.raises(distlock.InvalidArgument):
        client.lock(key(), lease=0.0001)
    stranger = distlock.Client(service, token="no-such-token-000000000")
    with pytest.raises(distlock.Unauthenticated):
        stranger.try_lock(key())
    stranger.close()
    viewer = distlock.Client(service, token=TOKENS["viewer"])
    with pytest.raises(distlock.PermissionDenied):
        viewer.try_lock(key())
    viewer.close()
    with pytest.raises(ValueError):
        distlock.Client("ftp://127.0.0.1:1")


def test_tenants_apart(service, client):
    k = key()
    with client.lock(k):
        beta = distlock.Client(service, token=TOKENS["beta"])
        try:
            assert not beta.inspect(k).get("held")
            beta.try_lock(k).release()  # beta's own key of the same name
        finally:
            beta.close()


def test_session(client, other):
    a, b = key(), key()
    with client.session(ttl=2) as s:
        la = client.lock(a, session=s)
        lb = client.lock(b, session=s)
        time.sleep(3)  # past the TTL: only the session's KeepAlives keep them
        assert other.inspect(a).get("held") and other.inspect(b).get("held")
        assert la.held and lb.held
    assert not other.inspect(a).get("held") and not other.inspect(b).get("held")


def test_semaphore(client, other):
    name = key()
    sem = client.semaphore(name, 2)
    p1, p2 = sem.acquire(lease=30), sem.acquire(lease=30)
    assert p2.fence > p1.fence
    with pytest.raises(distlock.NotAcquired):
        other.semaphore(name, 2).try_acquire()
    threading.Timer(0.3, p1.release).start()
    p3 = other.semaphore(name, 2).acquire(wait=10)
    permits, held = sem.inspect()
    assert permits == 2 and len(held) == 2
    with pytest.raises(distlock.InvalidArgument):
        other.semaphore(name, 3).try_acquire()
    for p in (p2, p3):
        p.release()


def test_rwlock(client, other):
    name = key()
    rw = client.rwlock(name)
    r1, r2 = rw.read_lock(), rw.read_lock()
    with pytest.raises(distlock.NotAcquired):
        other.rwlock(name).write_lock(wait=0)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("w", other.rwlock(name).write_lock(wait=10)))
    t.start()
    deadline = time.monotonic() + 5
    while rw.inspect()[2] == 0:
        assert time.monotonic() < deadline, "the waiting writer kept no reader out"
        time.sleep(0.02)
    with pytest.raises(distlock.NotAcquired):
        rw.read_lock(wait=0)  # a writer waits: new readers stay out
    r1.release()
    r2.release()
    t.join(10)
    w = got["w"]
    assert w.fence > max(r1.fence, r2.fence)
    writer, held, _ = rw.inspect()
    assert writer and len(held) == 1
    w.release()


def test_rwlock_downgrade(client, other):
    # The writer becomes a reader: a waiting reader joins, a writer is
    # refused, and the hold carries on (token, fence, renewals) to its
    # release.
    name = key()
    rw, theirs = client.rwlock(name), other.rwlock(name)
    w = rw.write_lock(lease=1.5)
    with pytest.raises(distlock.NotAcquired):
        theirs.read_lock(wait=0)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("r", theirs.read_lock(wait=10)))
    t.start()
    rw.downgrade(w)
    t.join(10)
    r = got["r"]  # the waiting reader joined
    with pytest.raises(distlock.NotAcquired):
        theirs.write_lock(wait=0)
    writer, held, _ = rw.inspect()
    assert not writer and sorted(int(h["fence"]) for h in held) == sorted([w.fence, r.fence])
    rw.downgrade(w)  # a reader's hold stays as it is
    time.sleep(2)  # past its lease: only the renewals (RenewRW) keep it
    assert w.held and len(rw.inspect()[1]) == 2
    assert w.release()
    r.release()
    with pytest.raises(distlock.NotHeld):
        rw.downgrade(w)  # released: refused before any call
    theirs.write_lock(wait=0).release()  # nothing stays held

    # A hold the service no longer knows: NotHeld, and its loss is told.
    w = rw.write_lock(lease=30)
    client.call("ReleaseRW", {"name": name, "token": w.token})
    with pytest.raises(distlock.NotHeld):
        rw.downgrade(w)
    assert w.lost.wait(5) and "taken" in w.lost_reason
    for wrong in (other.rwlock(key()).write_lock(wait=0), other.try_lock(name), other.semaphore(name, 1).try_acquire()):
        with pytest.raises(distlock.InvalidArgument):
            rw.downgrade(wrong)  # no hold of this read-write lock
        assert wrong.release()


def test_election(client, other):
    name = key()
    el = client.election(name)
    a = el.campaign("10.0.0.1", lease=30)
    stream = other.election(name).observe()
    try:
        first = next(stream)["leader"]
        assert first["value"] == "10.0.0.1" and int(first["fence"]) == a.fence
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("b", other.election(name).campaign("10.0.0.2", wait=10)))
        t.start()
        time.sleep(0.3)
        assert el.leader()["value"] == "10.0.0.1"
        a.release()  # resigns
        t.join(10)
        b = got["b"]
        assert b.fence > a.fence
        for msg in stream:  # the first term's end may come first
            leader = msg["leader"]
            if leader.get("held"):
                assert leader["value"] == "10.0.0.2" and int(leader["fence"]) == b.fence
                break
            assert int(leader["fence"]) == a.fence
        assert el.leader()["value"] == "10.0.0.2"
        b.release()
    finally:
        stream.close()


def test_retry_by_request_id(client):
    k = key()
    body = {"key": k, "requestId": str(uuid.uuid4()), "lease": "30s"}
    first = client.call("Acquire", body)
    again = client.call("Acquire", body)  # a retry whose first answer was lost
    assert again["token"] == first["token"] and again["fence"] == first["fence"]
    client.call("Release", {"key": k, "token": first["token"]})


def test_close_releases(service, other):
    c = distlock.Client(service, token=TOKENS["alpha"])
    k, name = key(), key()
    lk = c.lock(k)
    permit = c.semaphore(name, 1).acquire()
    writer = c.rwlock(name).write_lock()
    c.close()
    assert not lk.held and not permit.held and not writer.held
    other.try_lock(k).release()
    other.semaphore(name, 1).try_acquire().release()
    other.rwlock(name).write_lock(wait=0).release()


def test_loss_when_the_service_dies():
    from conftest import running_service

    with running_service() as (proc, url):
        c = distlock.Client(url, token=TOKENS["alpha"], timeout=0.5)
        lease = 3.0
        lk = c.lock(key(), lease=lease)
        granted = time.monotonic()
        proc.kill()
        proc.wait()
        assert lk.lost.wait(lease + 1), "no loss told after the service died"
        told = time.monotonic() - granted
        assert told < lease, f"the loss was told {told:.2f}s after the grant, not within the lease of {lease}s"
        assert "expiring" in lk.lost_reason
        c.close()  # the service is gone: closing still returns


def test_unreachable_within_timeout():
    c = distlock.Client("http://127.0.0.1:9", timeout=1)
    start = time.monotonic()
    with pytest.raises(distlock.Unavailable) as refused:
        c.try_lock(key())
    assert time.monotonic() - start < 5
    assert "refused" in refused.value.message
    c.close()
    with socket.socket() as mute:  # accepts connections, never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        silent = distlock.Client(f"http://127.0.0.1:{mute.getsockname()[1]}", timeout=0.3)
        start = time.monotonic()
        with pytest.raises(distlock.NoAnswer):
            silent.try_lock(key())
        assert time.monotonic() - start < 0.3 * 5 + 1  # the timeout, for the call and its retries
        silent.close()


def test_wait_keeps_its_place_across_calls(monkeypatch, service, client, other):
    # B waits in calls of 0.5 s; C queues after it in one long call. The
    # holder lets go after B's first call ended: B, queued first, is next.
    monkeypatch.setattr(distlock.client, "MAX_CALL_WAIT", 0.5)
    k = key()
    first = client.lock(k, lease=30)
    order = []

    def b():
        lk = other.lock(k, lease=30, wait=20)
        order.append("B")
        time.sleep(0.1)
        lk.release()

    def c():
        g = client.call("Acquire", {"key": k, "wait": "20s"}, timeout=30)
        order.append("C")
        client.call("Release", {"key": k, "token": g["token"]})

    threads = [threading.Thread(target=b), threading.Thread(target=c)]
    threads[0].start()
    time.sleep(0.25)
    threads[1].start()
    time.sleep(1.1)  # B's first two calls have ended
    first.release()
    for t in threads:
        t.join(20)
    assert order == ["B", "C"]
