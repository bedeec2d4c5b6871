"""distlock: locks, semaphores, read-write locks and leader election from a
distlock lock service (`distlock serve`), with the Python standard library
alone, over Connect's JSON protocol.

    import distlock

    client = distlock.Client("http://127.0.0.1:7070", token=TOKEN)
    with client.lock("orders/42", lease=30) as lk:
        charge(order, fence=lk.fence)  # renewed every 10 s meanwhile
        if lk.lost.is_set():
            ...                        # taken or expired: stop writing

The lock renews itself from a background thread every third of its lease;
a refused renewal or a lease that ran out sets lk.lost and calls on_lost.
With Client(..., watch_loss=True) a forced release or an expiry is told as
soon as the service reports it, in milliseconds, from one event stream per
client.
client.request_release(key, reason) asks a key's holder to let go: the
lock stays held, and its release_requested is set (on_release_requested is
called) at its next renewal, or at once with watch_loss=True.
Pass lk.fence to what the lock guards, so that it can refuse a holder that
lost the lock without knowing (a paused process).
"""

from .client import Client, Election, Lock, LockSet, RWLock, Semaphore, Session
from .errors import (
    DeadlineExceeded,
    DistlockError,
    InvalidArgument,
    NotAcquired,
    NotHeld,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from .transport import NoAnswer

__all__ = [
    "Client", "Election", "Lock", "LockSet", "RWLock", "Semaphore", "Session",
    "DistlockError", "NotAcquired", "NotHeld", "InvalidArgument", "Unauthenticated",
    "PermissionDenied", "ResourceExhausted", "Unavailable", "DeadlineExceeded", "NoAnswer",
]
