"""Asking a holder to let go (request_release): the holder keeps its lock and
is told at once when its client follows the loss stream (watch_loss=True),
else at its next renewal; a free key, a bad reason and a later holder of the
key are not asked."""

import statistics
import threading
import time
import uuid

import pytest

import distlock
from conftest import TOKENS

# How soon a holder following the stream must be told; measured on a 2-core
# machine: a few ms.
TOLD_WITHIN = 0.5


def key():
    return "py-request/" + uuid.uuid4().hex


@pytest.fixture
def watching(service):
    c = distlock.Client(service, token=TOKENS["alpha"], watch_loss=True)
    yield c
    c.close()


@pytest.fixture
def plain(service):
    c = distlock.Client(service, token=TOKENS["alpha"])
    yield c
    c.close()


@pytest.fixture
def asker(service):
    c = distlock.Client(service, token=TOKENS["alpha"])
    yield c
    c.close()


def warm(c):
    """Opens c's loss stream (at its first lock) and waits until it is live."""
    c.try_lock(key()).release()
    assert c._watch.live.wait(5), "the loss stream did not go live within 5s"


def asked(asker, lk, reason, within):
    """Asks lk's holder to let go; returns how long it took to be told."""
    start = time.monotonic()
    got = asker.request_release(lk.name, reason)
    assert got["held"] and int(got["fence"]) == lk.fence
    assert lk.release_requested.wait(within), f"the holder of {lk.name} was not told within {within}s"
    return time.monotonic() - start


def test_told_at_once_by_the_stream(watching, asker, capsys):
    warm(watching)
    calls = []

    def on_release_requested(lk):
        calls.append(lk)
        if len(calls) == 1:
            raise RuntimeError("an on_release_requested that raises stops no other notice")

    took = []
    for i in range(10):
        lk = watching.lock(key(), lease=30, owner="py-holder", on_release_requested=on_release_requested)
        assert not lk.release_requested.is_set() and lk.release_reason is None
        took.append(asked(asker, lk, f"deploy {i}", 5))
        assert lk.release_reason == f"deploy {i}"
        assert lk.held and not lk.lost.is_set()  # asked, not taken
        assert asker.inspect(lk.name)["held"]
        assert lk.release()
    assert [c.release_reason for c in calls] == [f"deploy {i}" for i in range(10)]
    with capsys.disabled():
        print(f"\nrequest to release told by the stream after {statistics.median(took) * 1000:.1f} ms "
              f"(median), {max(took) * 1000:.1f} ms (max) of 10")
    assert max(took) < TOLD_WITHIN, f"told after {took}"


def test_told_at_the_next_renewal(plain, asker, capsys):
    # A 3 s lease renews every second: the request is told within one.
    calls = []
    lk = plain.lock(key(), lease=3, on_release_requested=calls.append)
    took = asked(asker, lk, "rebalancing", 3)
    with capsys.disabled():
        print(f"\nrequest to release told by a renewal after {took * 1000:.0f} ms (renewal every 1 s)")
    assert took < 1.9, f"told after {took:.3f}s"  # the first renewal, not the second
    assert lk.release_reason == "rebalancing" and calls == [lk]
    assert lk.held
    assert lk.release()


def test_told_once(watching, asker):
    # Told by the stream, then by the renewal too (the service keeps the
    # request for the renewal): the holder hears it once, the first reason.
    warm(watching)
    calls = []
    lk = watching.lock(key(), lease=1.5, on_release_requested=calls.append)
    asked(asker, lk, "first", TOLD_WITHIN)
    asker.request_release(lk.name, "second")
    time.sleep(0.7)  # past a renewal (every 0.5 s)
    assert calls == [lk] and lk.release_reason == "first" and lk.held
    assert lk.release()


def test_session_lock_and_term(watching, asker):
    warm(watching)
    with watching.session(ttl=15) as s:
        sl = watching.lock(key(), session=s)
        assert asked(asker, sl, "session lock", TOLD_WITHIN) < TOLD_WITHIN
        assert sl.held and not s.lost.is_set()
    term = watching.election(key()).campaign("10.0.0.1", lease=30)
    assert asked(asker, term, "resign, please", TOLD_WITHIN) < TOLD_WITHIN
    assert term.release_reason == "resign, please" and term.held
    assert term.release()


def test_free_key_and_bad_reasons(watching, asker, service):
    with pytest.raises(distlock.NotHeld):
        asker.request_release(key(), "nobody holds it")
    lk = watching.lock(key(), lease=30)
    for bad in ("", "   ", "x" * 257):
        with pytest.raises(distlock.InvalidArgument):
            asker.request_release(lk.name, bad)
    with pytest.raises(distlock.InvalidArgument):
        asker.request_release("bad\x00key", "a reason")
    beta = distlock.Client(service, token=TOKENS["beta"])
    try:
        with pytest.raises(distlock.NotHeld):  # beta's key of that name is free
            beta.request_release(lk.name, "another tenant")
    finally:
        beta.close()
    viewer = distlock.Client(service, token=TOKENS["viewer"])
    try:
        with pytest.raises(distlock.PermissionDenied):
            viewer.request_release(lk.name, "a viewer may not")
    finally:
        viewer.close()
    # Nothing asked so far: the first request told is the valid one.
    asked(asker, lk, "x" * 256, 5)
    assert lk.release_reason == "x" * 256
    assert lk.release()
    with pytest.raises(distlock.NotHeld):
        asker.request_release(lk.name, "released already")


def test_next_holder_not_told(watching, asker):
    # The holder asked releases before any renewal, so the service still
    # keeps the request for one. The next holder of the key renews every
    # half second and follows the stream, and is told neither by a renewal
    # nor by the request's event, even one that came late.
    warm(watching)
    k = key()
    a = watching.lock(k, lease=30)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("b", watching.lock(k, lease=1.5, wait=10)))
    t.start()
    asked(asker, a, "let b in", TOLD_WITHIN)
    assert a.release()
    t.join(10)
    b = got["b"]
    assert b.fence > a.fence
    watching._watch._event({"type": "TYPE_RELEASE_REQUESTED", "reason": "let b in",
                            "lock": {"key": k, "held": True, "fence": str(a.fence)}})
    time.sleep(1.2)  # two renewals
    assert not b.release_requested.is_set() and b.release_reason is None and b.held
    assert b.release()
