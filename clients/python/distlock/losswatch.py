"""The loss watch: one Watch stream per client that tells its locks at once
when the service reports them force-released or expired, or asked to be
released."""

import logging
import random
import socket
import threading
import time

# The pause before opening the stream again: doubled after each attempt
# that failed or lived less than BACKOFF_RESET seconds, from BACKOFF_MIN up
# to BACKOFF_MAX, and drawn at random in its upper half.
BACKOFF_MIN = 0.05
BACKOFF_MAX = 5.0
BACKOFF_RESET = 1.0

# The header of a Watch stream that has begun.
LIVE_HEADER = "Distlock-Watch-Live"

_LOSSES = {
    "TYPE_FORCE_RELEASED": "force-released: told by the service's event stream",
    "TYPE_EXPIRED": "expired at the service: told by its event stream",
}

# A request to release a hold: not a loss, the holder still holds it.
REQUESTED = "TYPE_RELEASE_REQUESTED"

# A release of a hold its holder still follows (it stops following before
# it releases): the service may tell an end it cannot explain as one, so
# the lock renews at once, and a refusal tells the loss.
RELEASED = "TYPE_RELEASED"

log = logging.getLogger("distlock")


class LossWatch:
    """Follows one Watch stream of the tenant's keys, from the client's first
    followed lock to close(), and tells a lock that the stream reports
    force-released or expired (a loss), or asked to be released (the lock
    is still held).

    An event is about a lock's hold when it names the lock's key and fence:
    the fence is unique to each grant of a key, so a late event about an
    earlier hold of the key (its release, expiry or forced release) never
    ends a later one. A release is no loss, but a lock still followed stops
    following before it releases: told of its release, it renews at once. Events missed while the stream is not live (before it
    first opens, while it is opened again) are not replayed: when it goes
    live, each lock granted before that renews at once, so that a loss
    meanwhile is told by the refused renewal."""

    def __init__(self, transport):
        self._t = transport
        self._mu = threading.Lock()
        self._held = {}  # (key, fence) -> Lock; an entry per followed lock
        self._thread = None
        self._closed = False
        self._wake = threading.Event()  # ends a pause at close()
        self._conn = None  # the stream's connection, for close()
        self._live_at = None  # when the current stream went live (monotonic); None if none is
        self.live = threading.Event()  # set while a stream is live
        self.opened = 0  # streams that went live, for tests and diagnostics

    def follow(self, lock):
        """Tells lock of its loss from now on; starts the stream if need be."""
        with self._mu:
            if self._closed:
                return
            self._held[(lock.name, lock.fence)] = lock
            # Live since before the acquisition was sent: any loss is to come.
            # Live since: the stream may have missed it. Not live: checked
            # when it goes live.
            check = self._live_at is not None and self._live_at > lock._sent
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="distlock loss watch", daemon=True)
                self._thread.start()
        if check:
            lock._check()

    def forget(self, lock):
        """Stops following lock (released or lost)."""
        with self._mu:
            k = (lock.name, lock.fence)
            if self._held.get(k) is lock:
                del self._held[k]

    def close(self):
        """Ends the stream and waits for its thread."""
        with self._mu:
            self._closed = True
            self._held.clear()
            conn, thread = self._conn, self._thread
        self._wake.set()
        _shut(conn)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _on_conn(self, conn):
        with self._mu:
            self._conn = conn
            closed = self._closed
        if closed:
            _shut(conn)

    def _run(self):
        failures = 0
        while True:
            with self._mu:
                if self._closed:
                    return
            started = time.monotonic()
            try:
                stream = self._t.stream("Watch", {}, timeout=self._t.timeout, on_conn=self._on_conn)
            except Exception:  # noqa: BLE001 - refused, unreachable, over the cap: opened again later
                stream = None
            if stream is not None:
                # The service sends this header once the stream has begun (a
                # refused one ends at once, without it): every change after
                # it is told.
                if stream.header(LIVE_HEADER) is not None:
                    self._went_live()
                try:
                    for msg in stream:
                        self._event(msg.get("event") or {})
                except Exception:  # noqa: BLE001 - ended by the service, a restart, a cut or close()
                    pass
                finally:
                    stream.close()
                    with self._mu:
                        self._live_at = None
                        self.live.clear()
            with self._mu:
                self._conn = None
            if time.monotonic() - started >= BACKOFF_RESET:
                failures = 0
            pause = min(BACKOFF_MAX, BACKOFF_MIN * 2 ** failures)
            failures = min(failures + 1, 16)
            self._wake.wait(random.uniform(pause / 2, pause))

    def _went_live(self):
        now = time.monotonic()
        with self._mu:
            if self._closed:
                return
            self._live_at = now
            self.opened += 1
            self.live.set()
            stale = [lk for lk in self._held.values() if lk._sent < now]
        for lk in stale:
            lk._check()

    def _event(self, ev):
        typ = ev.get("type")
        reason = _LOSSES.get(typ)
        if reason is None and typ not in (REQUESTED, RELEASED):
            return
        info = ev.get("lock") or {}
        try:
            k = (info.get("key", ""), int(info.get("fence", 0)))
        except (TypeError, ValueError):
            return
        with self._mu:
            lk = self._held.get(k)
        if lk is None:
            return
        if typ == RELEASED:
            lk._check()
            return
        if reason is None:  # asked to release: _asked logs an on_release_requested that raised
            lk._asked(ev.get("reason", ""))
            return
        try:
            lk._lose(reason)
        except Exception:  # noqa: BLE001 - an on_lost that raised stops no other notice
            log.exception("distlock: on_lost of %r raised", lk.name)


def _shut(conn):
    """Ends a connection's call from another thread: its read or wait ends."""
    sock = conn.sock if conn is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
