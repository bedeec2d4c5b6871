"""The client: locks, sessions, semaphores, read-write locks, elections."""

import logging
import random
import threading
import time
import unicodedata
import uuid

from .errors import DistlockError, InvalidArgument, NotAcquired, NotHeld
from .losswatch import LossWatch
from .transport import NoAnswer, Transport

# The longest wait one call asks the service for; a longer wait is made of
# such calls one after another (the service's --max-wait is 5 minutes).
MAX_CALL_WAIT = 60.0

# How many times a call whose answer never came is sent again (with its
# request id, which makes the retry return what the first call got).
RETRIES = 3

# The most keys one lock_all takes, as the Go client's MaxLockAllKeys.
MAX_LOCK_ALL_KEYS = 64

# The shortest time lock_all waits for a held key while it holds the keys
# before it, in seconds, as the Go client's; each such wait adds a random
# part of as much again.
HOLDING_WAIT = 0.25

# The most names one path of lock_path names, as the Go client's
# MaxPathDepth.
MAX_PATH_DEPTH = 16

# The longest key, in bytes, as the Go client's MaxKeyLen.
MAX_KEY_LEN = 512

# Bounds the withdrawal of an intent (a semaphore's call of several permits,
# a read-write lock's writer) after a wait that failed: the service ends the
# intent by itself 2 s after the wait's last call.
WITHDRAW_TIMEOUT = 1.0

log = logging.getLogger("distlock")


def duration(seconds):
    """Protobuf's JSON form of a duration in seconds: "1.500s"."""
    return f"{seconds:.3f}s"


def seconds(text):
    """The seconds of protobuf's JSON form of a duration ("30s")."""
    return float(text.rstrip("s")) if text else 0.0


class Client:
    """A client of one lock service.

    url is the service's address (http://host:7070); token the bearer
    token of a tenant's client, or None against --insecure-no-auth. timeout
    bounds each call that does not wait. A Client is safe for use from
    several threads; close it when done.

    watch_loss=True makes its locks (session locks and election terms too)
    learn that they were force-released or expired, or that somebody asked
    for them (request_release), as soon as the service reports it, in
    milliseconds, rather than at their next renewal (a third of the lease):
    the client keeps one Watch stream of its tenant's keys open, in a
    thread, from its first lock to close(). The stream counts against the
    tenant's streams (--max-streams-per-tenant, 64 unless set) and carries
    every lock event of the tenant, so share one client per process. The
    renewals go on as before, and tell a loss or a request when the stream
    is down. Permits and read-write holds learn of a loss at their renewal.
    The default is off.
    """

    def __init__(self, url="http://127.0.0.1:7070", token=None, timeout=10.0, watch_loss=False):
        self._t = Transport(url, token, timeout)
        self._mu = threading.Lock()
        self._holds = set()  # held locks, permits, holds, terms and open sessions
        self._watch = LossWatch(self._t) if watch_loss else None

    def close(self):
        """Releases what the client still holds (best effort, each within the
        timeout), closes its sessions, its loss watch and its connections."""
        if self._watch is not None:
            self._watch.close()
        with self._mu:
            holds, self._holds = list(self._holds), set()
        for h in holds:
            try:
                h.release() if isinstance(h, Lock) else h.close()
            except Exception:  # noqa: BLE001 - the rest still go
                pass
        self._t.close()

    def _track(self, h):
        with self._mu:
            self._holds.add(h)

    def _untrack(self, h):
        with self._mu:
            self._holds.discard(h)
        if self._watch is not None and isinstance(h, Lock):
            self._watch.forget(h)

    def _follow(self, lk):
        if self._watch is not None and lk._kind.watched:
            self._watch.follow(lk)

    def _untrack_watch(self, lk):
        if self._watch is not None:
            self._watch.forget(lk)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, method, body, timeout=None):
        """Makes one LockService call: body and answer as in the proto's JSON."""
        return self._t.unary(method, body, timeout)

    def _withdraw_intent(self, method, name, intent):
        """Ends the intent of a wait that failed (method: WithdrawPermitIntent
        for several permits, WithdrawIntent for a writer), so that the calls
        it kept out get in now rather than when it lapses."""
        try:
            self._t.unary(method, {"name": name, "intent": intent}, timeout=WITHDRAW_TIMEOUT)
        except Exception:  # noqa: BLE001 - the intent ends by itself 2 s after the last call
            pass

    def _acquire(self, method, body, wait):
        """Acquires with a new request id, waiting up to wait seconds (None:
        until granted), in calls of at most MAX_CALL_WAIT (a lock's calls
        keep its place in the key's queue from one to the next); a call whose
        answer never came is sent again with the same request id. Returns
        the grant and when the call that got it was sent (monotonic)."""
        body = dict(body, requestId=str(uuid.uuid4()), firstTry=True)
        deadline = None if wait is None else time.monotonic() + wait
        retries = 0
        while True:
            left = MAX_CALL_WAIT if deadline is None else max(0.0, deadline - time.monotonic())
            this = min(left, MAX_CALL_WAIT)
            body.pop("wait", None)
            if this > 0:
                body["wait"] = duration(this)
            if method == "Acquire":
                # A call that is not the wait's last says so, and the
                # service keeps the lock's place in line for the next.
                body["resumes"] = this > 0 and (deadline is None or left > this)
            sent = time.monotonic()
            try:
                return self._t.unary(method, body, timeout=this + self._t.timeout), sent
            except NotAcquired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                body["firstTry"] = True  # refused: no earlier call was granted
            except NoAnswer:
                retries += 1
                if retries > RETRIES:
                    raise
                body["firstTry"] = False  # it may have been granted: ask again by id

    def lock(self, key, lease=30.0, wait=None, owner=None, business_id=None, labels=None,
             session=None, on_lost=None, on_release_requested=None):
        """Takes key, waiting up to wait seconds (None: until it is granted),
        and returns a Lock that renews itself every lease/3 until released.
        Raises NotAcquired if the wait ends first. Use it as a context
        manager: `with client.lock("k", lease=30) as lk:`.
        on_release_requested(lock) is called once if somebody asks the
        holder to let go (request_release); see Lock.release_requested."""
        body = _meta({"key": key, "lease": duration(lease)}, owner, business_id, labels)
        if session is not None:
            body["sessionId"] = session.id
        g, sent = self._acquire("Acquire", body, wait)
        kind = _SESSION_LOCK if session is not None else _LOCK
        return Lock(self, kind, key, g, on_lost, session, sent=sent, on_release_requested=on_release_requested)

    def try_lock(self, key, **kw):
        """lock() with no wait: NotAcquired at once if key is held."""
        return self.lock(key, wait=0, **kw)

    def lock_all(self, keys, wait=None, **kw):
        """Takes every one of keys, or none, and returns a LockSet, as the Go
        client's LockAll does: the keys are tried without waiting in the
        byte order of their names, whatever order keys gives. At the first
        held elsewhere the keys taken after it are released and it is
        waited for holding those before it, for HOLDING_WAIT to twice that
        (random); still held then, every key is released and it alone is
        waited for. Then the rest are tried again with it kept. A caller
        that holds keys waits only for a key after all of them, and only
        for a bounded time, so sets that overlap never wait on each other in
        a cycle, and a key waited for is usually kept, so sets complete even
        where every key has waiters queued. A key whose try failed (not held
        elsewhere) is waited for holding nothing. wait bounds the whole set
        (None: until granted); NotAcquired names the key that stayed held,
        and nothing stays taken. kw are lock()'s. 1 to 64 keys without
        repeats, else InvalidArgument."""
        keys = list(keys)
        ordered = sorted(keys, key=lambda k: k.encode())
        if not 1 <= len(keys) <= MAX_LOCK_ALL_KEYS or len(set(keys)) != len(keys):
            raise InvalidArgument("invalid_argument",
                                  f"lock all: {len(keys)} keys, want 1 to {MAX_LOCK_ALL_KEYS} without repeats")
        deadline = None if wait is None else time.monotonic() + wait
        held = {}
        while True:
            busy, failed = None, False
            for k in ordered:
                if k in held:
                    continue
                try:
                    held[k] = self.try_lock(k, **kw)
                except DistlockError as e:
                    if not held and not isinstance(e, NotAcquired):
                        raise
                    busy, failed = k, not isinstance(e, NotAcquired)
                    break
            if busy is None:
                return LockSet([held[k] for k in ordered])
            held[busy] = self._wait_for_key(ordered, held, busy, failed, deadline, kw)

    def _wait_for_key(self, ordered, held, busy, failed, deadline, kw):
        """lock_all's wait for busy: holding the keys of held before it for
        a bounded time, then (still held, or its try failed) holding
        nothing. On error held is emptied and the error raised."""
        def left(until):
            return None if until is None else max(0.0, until - time.monotonic())

        try:
            _release_all([held.pop(k) for k in ordered if k in held and k.encode() > busy.encode()])
        except DistlockError:
            _release_all([held.pop(k) for k in ordered if k in held])
            raise
        if held and not failed:
            until = time.monotonic() + HOLDING_WAIT * (1 + random.random())
            cut_by_deadline = deadline is not None and deadline <= until
            if cut_by_deadline:
                until = deadline
            try:
                return self.lock(busy, wait=left(until), **kw)
            except DistlockError:
                if cut_by_deadline:
                    _release_all([held.pop(k) for k in ordered if k in held])
                    raise
        _release_all([held.pop(k) for k in ordered if k in held])
        return self.lock(busy, wait=left(deadline), **kw)

    def lock_path(self, path, lease=30.0, wait=None, owner=None, on_lost=None):
        """Takes the last node of path alone, in a tree of names: a
        hierarchical lock, as the Go client's LockPath. path lists the
        node's ancestors first, from the root: a table, then one of its rows
        (["orders", "orders/42"]). Each ancestor is taken as a reader of its
        read-write lock (an intention: a node below it is in use) and the
        node as the writer of its own. So a lock of a table excludes every
        lock of its rows, waits for those held to end and keeps new ones out
        meanwhile (a waiting writer does), while locks of different rows run
        side by side and two of one row exclude each other.

        Nodes are taken from the root down, each held while the next is
        waited for; wait bounds the whole path (None: until granted), and on
        failure what was taken is released before the error is raised
        (NotAcquired if a node stayed held). A name must have the same
        ancestors in every path that names it: two callers whose paths order
        two names differently can wait on each other until their waits end.
        Returns a LockSet of the nodes' holds, root first: held is false
        once any is lost, fence(name) gives each node's fence (the last
        node's is the one to give the resource), release() releases them
        all. on_lost(lock) is called for a node whose hold is lost. path
        must list 1 to MAX_PATH_DEPTH names without repeats, each a valid
        key, else InvalidArgument before any call."""
        return self._lock_path(path, True, lease, wait, owner, on_lost)

    def rlock_path(self, path, lease=30.0, wait=None, owner=None, on_lost=None):
        """lock_path() with the last node taken as a reader: readers of a node
        share it and exclude its writers and those of its ancestors. A
        reader of an inner node does not exclude writers below it (they too
        are readers of it): to read a whole table while no row changes, take
        the table with lock_path."""
        return self._lock_path(path, False, lease, wait, owner, on_lost)

    def _lock_path(self, path, write, lease, wait, owner, on_lost):
        path = _check_path(path)
        deadline = None if wait is None else time.monotonic() + wait
        taken = []
        try:
            for i, name in enumerate(path):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                node = self.rwlock(name)
                take = node.write_lock if write and i == len(path) - 1 else node.read_lock
                taken.append(take(lease=lease, wait=left, owner=owner, on_lost=on_lost))
        except BaseException:
            try:
                _release_all(taken)
            except Exception:  # noqa: BLE001 - the acquisition's error is the one to raise
                pass
            raise
        return LockSet(taken)

    def inspect(self, key):
        """Who holds key, as the service's Lock message (no token)."""
        return self._t.unary("Inspect", {"key": key}).get("lock", {})

    def force_release(self, key, reason, tenant=None):
        """Frees key whoever holds it (an admin's or tenant admin's call), with
        the reason the audit log keeps; returns the hold it removed (held is
        false if the key was free). Its holder learns at once if it follows
        the loss stream (watch_loss), else at its next renewal."""
        body = {"key": key, "reason": reason}
        if tenant is not None:
            body["tenant"] = tenant
        return self._t.unary("ForceRelease", body).get("lock", {})

    def request_release(self, key, reason):
        """Asks the holder of key, a key of the client's tenant, to release it
        when it can: the holder keeps the lock, and is told with reason
        (required, at most 256 bytes) through its lock's release_requested.
        It is told at once if its client follows the loss stream
        (watch_loss), else at its next renewal through the same service
        instance; a session lock only by the stream. Returns the hold that
        was asked, as force_release does; raises NotHeld if key is free
        (nobody was asked) and InvalidArgument for an empty or long reason.
        Only the hold found now is asked: a later holder of key is not."""
        lock = self._t.unary("RequestRelease", {"key": key, "reason": reason}).get("lock", {})
        if not lock.get("held"):
            raise NotHeld("not_found", f"request release {key!r}: the key is not held: nobody was asked")
        return lock

    def session(self, ttl=15.0, on_lost=None):
        """Opens a session that keeps itself alive every ttl/3: locks taken
        with session=it share its TTL and end with it."""
        return Session(self, ttl, on_lost)

    def semaphore(self, name, permits):
        """A counting semaphore of permits permits."""
        return Semaphore(self, name, permits)

    def rwlock(self, name):
        """A read-write lock."""
        return RWLock(self, name)

    def election(self, name):
        """A leader election, shared with the Go package election."""
        return Election(self, name)


def _bad_key(key):
    """Why key is no valid key (non-empty UTF-8 of at most MAX_KEY_LEN bytes
    without control characters), as the Go client's ValidateKey; None if it
    is one."""
    if not isinstance(key, str):
        return f"a {type(key).__name__}, not a string"
    if not key:
        return "empty"
    try:
        n = len(key.encode())
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if n > MAX_KEY_LEN:
        return f"{n} bytes, the maximum is {MAX_KEY_LEN}"
    for i, ch in enumerate(key):
        if unicodedata.category(ch) == "Cc":
            return f"a control character at byte {len(key[:i].encode())}"
    return None


def _check_path(path):
    """The names of a path of lock_path, as a list; InvalidArgument unless it
    has 1 to MAX_PATH_DEPTH valid keys without repeats."""
    if isinstance(path, (str, bytes)):
        raise InvalidArgument("invalid_argument", f"lock path {path!r}: want a list of names, root first")
    path = list(path)
    if not 1 <= len(path) <= MAX_PATH_DEPTH:
        raise InvalidArgument("invalid_argument", f"lock path: {len(path)} names, want 1 to {MAX_PATH_DEPTH}")
    for i, name in enumerate(path):
        why = _bad_key(name)
        if why is not None:
            raise InvalidArgument("invalid_argument", f"lock path: name {name!r}: {why}")
        if name in path[:i]:
            raise InvalidArgument("invalid_argument", f"lock path: name {name!r}: the name is in the path twice")
    return path


def _meta(body, owner, business_id, labels):
    if owner:
        body["owner"] = owner
    if business_id:
        body["businessId"] = business_id
    if labels:
        body["labels"] = dict(labels)
    return body


class _Kind:
    """The calls that renew and release one kind of hold, and the fields
    that name it in each."""

    def __init__(self, renew, renew_field, release, release_field, renews=True, watched=True):
        self.renew, self.renew_field = renew, renew_field
        self.release, self.release_field = release, release_field
        self.renews = renews
        self.watched = watched  # the Watch stream tells of it (by its key and fence)


_LOCK = _Kind("Renew", "key", "Release", "key")
_SESSION_LOCK = _Kind("Renew", "key", "Release", "key", renews=False)  # the session's KeepAlive renews it
_PERMIT = _Kind("RenewPermit", "name", "ReleasePermit", "name", watched=False)
_RW = _Kind("RenewRW", "name", "ReleaseRW", "name", watched=False)
_TERM = _Kind("Renew", "key", "Resign", "name")  # a term is renewed as its lock, ended by Resign


def _release_all(locks):
    """Releases locks in reverse order, each tried even if one before
    failed; raises the first failure."""
    first = None
    for lk in reversed(locks):
        try:
            lk.release()
        except Exception as e:  # noqa: BLE001 - the rest are released first
            first = first or e
    if first is not None:
        raise first


class LockSet:
    """Holds taken together, as one: by Client.lock_all, a Lock per key in
    the byte order of the keys; by Client.lock_path or rlock_path, a
    read-write hold per node of the path, root first. held is false once
    any of them is lost or released; release() releases them all. Use it as
    a context manager."""

    def __init__(self, locks):
        self.locks = locks

    @property
    def held(self):
        """False once any lock of the set is lost or released."""
        return all(lk.held for lk in self.locks)

    def fence(self, key):
        """The fence of key's lock (of a node's hold, for a path); KeyError
        if key is not in the set."""
        for lk in self.locks:
            if lk.name == key:
                return lk.fence
        raise KeyError(key)

    def release(self):
        """Releases every lock of the set, in the reverse of its order (a
        path's last node first); a failure is raised once every release was
        tried."""
        _release_all(self.locks)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class Lock:
    """A held lock, permit, read-write hold or election term.

    token proves it; fence strictly increases with every grant of the name:
    pass it to what the lock guards. It renews itself every lease/3 from a
    background thread until released; if a renewal is refused (the lock was
    taken or force-released) or none succeeds before the lease ends, it is
    lost: lost is set, lost_reason says why and on_lost(lock) is called,
    once, from a thread of the client (keep it short). With the client's
    watch_loss, a lock learns of a forced release or an expiry as soon as
    the service reports it.

    When somebody asks the holder to let go (Client.request_release), the
    lock stays held and renewed: release_requested is set, release_reason
    says why and on_release_requested(lock) is called, once, from a thread
    of the client. Finish the unit of work and release. A lock learns of it
    at its next renewal, or at once with the client's watch_loss (a session
    lock only so: its session's KeepAlive does not tell). Permits and
    read-write holds are never asked.
    """

    def __init__(self, client, kind, name, grant, on_lost=None, session=None, release_name=None, sent=None,
                 on_release_requested=None):
        self._c = client
        self._kind = kind
        self.name = name
        self._release_name = release_name or name
        self.token = grant["token"]
        self.fence = int(grant.get("fence", 0))
        self.lease = seconds(grant.get("lease"))
        self._until = time.monotonic() + self.lease
        self._sent = time.monotonic() if sent is None else sent  # when the acquisition was sent
        self.lost = threading.Event()
        self.lost_reason = None
        self._on_lost = on_lost
        self.release_requested = threading.Event()
        self.release_reason = None
        self._on_release_requested = on_release_requested
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the renewal thread's pause: released, lost or to renew now
        self._thread = None
        client._track(self)
        if kind.renews:
            self._thread = threading.Thread(target=self._keep, name=f"distlock renew {name}", daemon=True)
            self._thread.start()
        elif session is not None:
            session._follow(self)
        client._follow(self)

    @property
    def held(self):
        """False once released or lost."""
        return not self._stop.is_set() and not self.lost.is_set()

    def _keep(self):
        # Renewals that keep failing give up a tenth of the lease (at most a
        # second) before it ends, so that the loss is told while the lease
        # still holds the lock: the holder stops before another can start.
        margin = min(self.lease / 10, 1.0)
        interval = max(self.lease / 3, 0.05)
        while True:
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set() or self.lost.is_set():
                return
            sent = time.monotonic()
            try:
                r = self._c.call(self._kind.renew, {self._kind.renew_field: self.name, "token": self.token,
                                                    "lease": duration(self.lease)})
            except NotHeld as e:
                self._lose(f"taken or released by another: {e.message}")
                return
            except Exception:  # noqa: BLE001 - a failed renewal is retried until the lease ends
                left = self._until - margin - time.monotonic()
                if left <= 0:
                    self._lose("expiring: no renewal succeeded within the lease")
                    return
                interval = min(0.5, max(left, 0.01))
                continue
            self._until = sent + seconds(r.get("lease")) if r.get("lease") else sent + self.lease
            interval = max(self.lease / 3, 0.05)
            if r.get("releaseRequested"):  # sent once, by the instance the request went to
                self._asked(r["releaseRequested"])

    def _check(self):
        """Renews now, if it renews itself: a loss the loss watch may have
        missed is then told by the refused renewal."""
        if self._thread is not None:
            self._wake.set()

    def _lose(self, reason):
        with self._mu:
            if self.lost.is_set() or self._stop.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
        self._wake.set()
        self._c._untrack_watch(self)
        if self._on_lost is not None:
            self._on_lost(self)

    def _asked(self, reason):
        """Tells that somebody asked the holder to release the lock, once,
        unless it was released or lost first."""
        with self._mu:
            if self.release_requested.is_set() or self._stop.is_set() or self.lost.is_set():
                return
            self.release_reason = reason
            self.release_requested.set()
        if self._on_release_requested is not None:
            try:
                self._on_release_requested(self)
            except Exception:  # noqa: BLE001 - the renewals and the stream go on
                log.exception("distlock: on_release_requested of %r raised", self.name)

    def release(self):
        """Stops the renewals and frees the hold. Returns False if it was
        lost already (the service no longer knew the token)."""
        with self._mu:
            if self._stop.is_set():
                return False
            self._stop.set()
        self._wake.set()
        self._c._untrack(self)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self._c.call(self._kind.release, {self._kind.release_field: self._release_name, "token": self.token})
        except NotHeld:
            return False
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class Session:
    """A session: locks tied to it share its TTL and one keepalive."""

    def __init__(self, client, ttl, on_lost=None):
        self._c = client
        r = client.call("OpenSession", {"ttl": duration(ttl)})
        self.id = r["sessionId"]
        self.ttl = seconds(r.get("ttl")) or ttl
        self._until = time.monotonic() + self.ttl
        self.lost = threading.Event()
        self.lost_reason = None
        self._on_lost = on_lost
        self._locks = []
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="distlock session", daemon=True)
        self._thread.start()
        client._track(self)

    def _follow(self, lock):
        with self._mu:
            self._locks.append(lock)

    def _keep(self):
        interval = self.ttl / 3
        while not self._stop.wait(interval):
            sent = time.monotonic()
            try:
                self._c.call("KeepAlive", {"sessionId": self.id})
            except NotHeld as e:
                self._lose(f"the session ended: {e.message}")
                return
            except Exception:  # noqa: BLE001 - retried until the TTL ends
                left = self._until - min(self.ttl / 10, 1.0) - time.monotonic()
                if left <= 0:
                    self._lose("expiring: no KeepAlive succeeded within the TTL")
                    return
                interval = min(0.5, max(left, 0.01))
                continue
            self._until = sent + self.ttl
            interval = self.ttl / 3

    def _lose(self, reason):
        self.lost_reason = reason
        self.lost.set()
        with self._mu:
            locks = list(self._locks)
        for lk in locks:
            lk._lose(reason)
        if self._on_lost is not None:
            self._on_lost(self)

    def close(self):
        """Ends the session and releases its locks."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._c._untrack(self)
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._mu:
            for lk in self._locks:
                lk._stop.set()
                self._c._untrack(lk)
        try:
            self._c.call("CloseSession", {"sessionId": self.id})
        except NotHeld:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Semaphore:
    """At most permits holders of name at once, each a Lock."""

    def __init__(self, client, name, permits):
        self._c, self.name, self.permits = client, name, permits

    def acquire(self, lease=30.0, wait=None, owner=None, business_id=None, labels=None, on_lost=None, count=1):
        """Takes a permit, waiting up to wait seconds (None: until one is
        free); raises NotAcquired if none came free.

        count > 1 takes that many permits as one hold: one Lock (one token,
        fence and lease, renewed and released together) that counts count
        permits (inspect() reports it as "permits"). While such a call
        waits, no later call of the semaphore is granted permits, whatever
        its count, so that a stream of small calls cannot starve it; the
        wait's calls carry an intent id of its own that keeps them out
        between calls too, and a wait that fails withdraws it. A try
        (wait=0) keeps nobody out. count must be 1 to permits, else
        InvalidArgument before any call. A store that cannot take several
        permits in one hold (the service's embedded store) refuses count > 1
        with a DistlockError of code "unimplemented"."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= self.permits:
            raise InvalidArgument("invalid_argument",
                                  f"semaphore {self.name!r}: count is {count!r}: want 1 to its {self.permits} permits")
        body = _meta({"name": self.name, "permits": self.permits, "lease": duration(lease)}, owner, business_id, labels)
        intent = None
        if count > 1:
            body["count"] = count
            if wait != 0:
                intent = body["intent"] = uuid.uuid4().hex
        try:
            g, sent = self._c._acquire("AcquirePermit", body, wait)
        except BaseException:
            if intent is not None:
                self._c._withdraw_intent("WithdrawPermitIntent", self.name, intent)
            raise
        return Lock(self._c, _PERMIT, self.name, g, on_lost, sent=sent)

    def try_acquire(self, **kw):
        """acquire() with no wait."""
        return self.acquire(wait=0, **kw)

    def set_permits(self, n):
        """Changes the number of permits, for every caller."""
        self._c.call("SetPermits", {"name": self.name, "permits": n})
        self.permits = n

    def inspect(self):
        """The number of permits and the live permits (no tokens)."""
        r = self._c.call("InspectPermits", {"name": self.name})
        return int(r.get("permits", 0)), r.get("held", [])


class RWLock:
    """Readers share name; a writer holds it alone, and keeps new readers
    out while it waits."""

    def __init__(self, client, name):
        self._c, self.name = client, name

    def _hold(self, write, lease, wait, owner, on_lost):
        body = _meta({"name": self.name, "write": write, "lease": duration(lease)}, owner, None, None)
        intent = None
        if write and wait != 0:
            # The service keeps new readers out while a call waits; between
            # two calls of a long wait, the intent does (for 2 s after each).
            intent = body["intent"] = uuid.uuid4().hex
        try:
            g, sent = self._c._acquire("AcquireRW", body, wait)
        except BaseException:
            if intent is not None:
                self._c._withdraw_intent("WithdrawIntent", self.name, intent)
            raise
        return Lock(self._c, _RW, self.name, g, on_lost, sent=sent)

    def read_lock(self, lease=30.0, wait=None, owner=None, on_lost=None):
        """Takes a reader's hold."""
        return self._hold(False, lease, wait, owner, on_lost)

    def write_lock(self, lease=30.0, wait=None, owner=None, on_lost=None):
        """Takes the writer's hold, waiting up to wait seconds (None: until
        granted). While it waits, no new reader gets in, so that a stream of
        readers cannot starve it: the wait's calls carry an intent id of its
        own that keeps readers out between calls too, and a wait that fails
        withdraws it. A try (wait=0) keeps nobody out."""
        return self._hold(True, lease, wait, owner, on_lost)

    def downgrade(self, lock):
        """Turns lock, the writer's hold of this read-write lock, into a
        reader's, with no moment in which another writer could get in:
        readers may join it at once, and lock carries on as the reader's
        hold, with its token, fence and lease, renewed as before. A reader's
        hold stays as it is. Raises NotHeld if lock was released or lost
        (the service no longer knows its token; a loss is then told at
        once), InvalidArgument if lock is no hold of this read-write lock."""
        if not isinstance(lock, Lock) or lock._kind is not _RW or lock.name != self.name:
            raise InvalidArgument("invalid_argument", f"downgrade {self.name!r}: want a hold of this read-write lock, from its write_lock()")
        if not lock.held:
            raise NotHeld("not_found", f"downgrade {self.name!r}: the hold was released or lost")
        retries = 0
        while True:
            try:
                self._c.call("DowngradeRW", {"name": self.name, "token": lock.token})
                return
            except NotHeld:
                lock._check()  # its renewal is refused too, and tells the loss
                raise
            except NoAnswer:
                retries += 1  # a second downgrade of one hold changes nothing: send it again
                if retries > RETRIES:
                    raise

    def inspect(self):
        """(writer, holds, writers waiting)."""
        r = self._c.call("InspectRW", {"name": self.name})
        return bool(r.get("writer")), r.get("held", []), int(r.get("writersWaiting", 0))


class Election:
    """A leader election: one candidate leads at a time."""

    def __init__(self, client, name):
        self._c, self.name = client, name

    def campaign(self, value, lease=30.0, wait=None, owner=None, on_lost=None, on_release_requested=None):
        """Waits to lead, up to wait seconds (None: until leading), and
        returns the term: a Lock, renewed in the background, whose release
        resigns. A request to release the term's key ("election/<name>")
        is a request to resign: the term keeps leading until it does."""
        body = _meta({"name": self.name, "value": value, "lease": duration(lease)}, owner, None, None)
        g, sent = self._c._acquire("Campaign", body, wait)
        return Lock(self._c, _TERM, g["key"], g, on_lost, release_name=self.name, sent=sent,
                    on_release_requested=on_release_requested)

    def leader(self):
        """The leader: {"held", "value", "fence", ...}; {} if nobody leads."""
        return self._c.call("Leader", {"name": self.name})

    def observe(self):
        """The leader now, then each change, as a Stream of {"leader": ...}
        messages: iterate it, and close() it to stop."""
        return self._c._t.stream("Observe", {"name": self.name})
