"""Client.lock_all against a real service: all the keys or none, and no
cycle of waits whatever order callers name their keys in."""

import random
import threading
import time
import uuid

import pytest

import distlock
from distlock import InvalidArgument, NotAcquired

from conftest import TOKENS


def test_lock_all_contention(service):
    """8 threads over two clients take random subsets of 6 keys, named in
    random orders, for 2 s: none waits past its 30 s bound (a cycle of
    waits would make it) and no key is ever held by two of them."""
    base = "py-all/" + uuid.uuid4().hex
    keys = [f"{base}/{i}" for i in range(6)]
    clients = [distlock.Client(service, token=TOKENS["alpha"]) for _ in range(2)]
    holders = {k: 0 for k in keys}
    mu = threading.Lock()
    errors, overlaps, sets = [], [], [0]
    until = time.monotonic() + 2

    def work(n):
        rng = random.Random(n)
        c = clients[n % 2]
        while time.monotonic() < until and not errors:
            picked = rng.sample(keys, rng.randint(1, 3))
            try:
                s = c.lock_all(picked, wait=30, lease=10)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{picked}: {e!r}")
                return
            with mu:
                for k in picked:
                    holders[k] += 1
                    if holders[k] != 1:
                        overlaps.append(k)
            time.sleep(rng.random() / 500)
            with mu:
                for k in picked:
                    holders[k] -= 1
            s.release()
            with mu:
                sets[0] += 1

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    assert not errors, errors
    assert not overlaps, f"keys held twice at once: {overlaps}"
    assert sets[0] > 0


def test_lock_all_all_or_none(service):
    """A held key without a wait: nothing taken. A set in any order: its
    locks in key order, each with its fence, all released together. Bad
    sets are refused."""
    client, other = (distlock.Client(service, token=TOKENS["alpha"]) for _ in range(2))
    try:
        all_or_none(client, other)
    finally:
        client.close()
        other.close()


def all_or_none(client, other):
    base = "py-all/" + uuid.uuid4().hex
    a, b, c = f"{base}/a", f"{base}/b", f"{base}/c"
    held = other.try_lock(b)
    with pytest.raises(NotAcquired):
        client.lock_all([c, b, a], wait=0)
    client.try_lock(a).release()  # a, tried before b, was given back
    held.release()
    with client.lock_all([c, a, b], wait=5) as s:
        assert [lk.name for lk in s.locks] == [a, b, c]
        assert s.held and s.fence(b) > 0
        with pytest.raises(KeyError):
            s.fence(base)
        with pytest.raises(NotAcquired):
            other.try_lock(c)
    assert not s.held
    other.try_lock(c).release()
    for bad in ([], [a, a], [f"{base}/{i}" for i in range(65)]):
        with pytest.raises(InvalidArgument):
            client.lock_all(bad)
