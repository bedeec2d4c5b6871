"""Client.lock_path and rlock_path against a real service: a table's lock
excludes its rows' and theirs exclude it, rows run side by side, a waiting
table lock keeps new rows out, and a path that fails leaves nothing taken."""

import threading
import time
import uuid

import pytest

import distlock
from distlock import InvalidArgument, NotAcquired
from distlock.client import MAX_PATH_DEPTH
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


def table():
    return "py-path/" + uuid.uuid4().hex


def holds(c, name):
    """How many holds name's read-write lock has, and whether a writer's."""
    writer, held, _ = c.rwlock(name).inspect()
    return len(held), writer


def test_table_and_rows(client, other):
    t = table()
    r1, r2 = f"{t}/1", f"{t}/2"
    with client.lock_path([t, r1]) as row:
        assert [lk.name for lk in row.locks] == [t, r1] and row.held
        assert row.fence(t) > 0 and row.fence(r1) > 0
        with pytest.raises(KeyError):
            row.fence(r2)
        with pytest.raises(NotAcquired):
            other.lock_path([t], wait=0)  # the table
        with pytest.raises(NotAcquired):
            other.lock_path([t, r1], wait=0)  # the same row
        with pytest.raises(NotAcquired):
            other.rlock_path([t, r1], wait=0)  # a read of the same row
        with other.lock_path([t, r2], wait=0), other.rlock_path([t], wait=0):  # another row; a read of the table
            assert holds(client, t) == (3, False) and holds(client, r1) == (1, True)
        # The refused paths took the table as a reader first: given back.
        assert holds(client, t) == (1, False)
    assert not row.held and holds(client, t) == (0, False) and holds(client, r1) == (0, False)

    with client.lock_path([t], wait=0) as whole:
        assert [lk.name for lk in whole.locks] == [t]
        with pytest.raises(NotAcquired):
            other.lock_path([t, r1], wait=0)
        with pytest.raises(NotAcquired):
            other.rlock_path([t, r1], wait=0)
    with other.rlock_path([t, r1], wait=0) as read, client.rlock_path([t, r1], wait=0):  # readers of a row share it
        assert read.held and holds(client, r1) == (2, False)


def test_waiting_table_keeps_new_rows_out(client, other):
    t = table()
    r1, r2 = f"{t}/1", f"{t}/2"
    row = client.lock_path([t, r1])
    got = {}

    def lock_table():
        try:
            got["table"] = other.lock_path([t], wait=10)
        except Exception as e:  # noqa: BLE001 - checked below
            got["err"] = e

    waiter = threading.Thread(target=lock_table)
    waiter.start()
    try:
        deadline = time.monotonic() + 5
        while client.rwlock(t).inspect()[2] == 0:
            assert time.monotonic() < deadline, "the table lock did not wait within 5 s"
            time.sleep(0.02)
        with pytest.raises(NotAcquired):
            client.lock_path([t, r2], wait=0)  # a new row stays out
        start = time.monotonic()
        with pytest.raises(NotAcquired):
            client.lock_path([t, r2], wait=0.5)  # the whole path's wait is bounded
        assert 0.4 < time.monotonic() - start < 3
    finally:
        row.release()
        waiter.join(10)
    assert "err" not in got, got.get("err")
    whole = got["table"]
    assert whole.held and whole.fence(t) > row.fence(t)
    whole.release()


def test_failed_path_releases_what_it_took(client, other):
    # The row is held: a path of it takes the table as a reader, waits for
    # the row until its wait ends, and gives the table back.
    t = table()
    r1 = f"{t}/1"
    row = other.lock_path([t, r1])
    start = time.monotonic()
    with pytest.raises(NotAcquired):
        client.lock_path([t, r1], wait=0.6)
    assert 0.5 < time.monotonic() - start < 3
    assert holds(client, t) == (1, False)
    row.release()
    deep = [t] + [f"{t}/{'x' * i}" for i in range(1, MAX_PATH_DEPTH)]
    with client.lock_path(deep, wait=5) as s:
        assert len(s.locks) == MAX_PATH_DEPTH and s.held
    client.lock_path([t], wait=0).release()  # nothing stays held


def test_bad_paths_refused_before_any_call():
    # Nothing listens on port 9: a call would be Unavailable.
    c = distlock.Client("http://127.0.0.1:9", timeout=1)
    bad = (
        [],
        [f"t/{i}" for i in range(MAX_PATH_DEPTH + 1)],
        ["t", "t/1", "t"],
        ["t", ""],
        ["t", "t/\x00"],
        ["t", "t/\x85"],
        ["x" * 513],
        ["é" * 257],
        ["t", 42],
        "t/1",
    )
    for path in bad:
        for lock in (c.lock_path, c.rlock_path):
            with pytest.raises(InvalidArgument):
                lock(path)
    c.close()
