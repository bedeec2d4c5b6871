"""The errors of the lock service, as Python exceptions.

Each mirrors a Go sentinel or a Connect code: NotAcquired is ErrNotAcquired
(ABORTED), NotHeld is ErrNotHeld (NOT_FOUND), InvalidArgument is
ErrInvalidKey / ErrInvalidOption (INVALID_ARGUMENT). Every one is a
DistlockError, which carries the service's code and message.
"""


class DistlockError(Exception):
    """An error of the lock service: code is Connect's ("aborted", ...)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class NotAcquired(DistlockError):
    """The lock (permit, hold, term) was not granted within the wait."""


class NotHeld(DistlockError):
    """The token no longer holds it: released, expired or taken."""


class InvalidArgument(DistlockError):
    """A bad key, lease, wait, label or token; nothing was changed."""


class Unauthenticated(DistlockError):
    """The bearer token is missing or unknown."""


class PermissionDenied(DistlockError):
    """The token's role does not allow the call."""


class ResourceExhausted(DistlockError):
    """Over a limit the service names: a rate, a cap of waiters or streams."""


class Unavailable(DistlockError):
    """The service or its store cannot answer now (or it is shutting down)."""


class DeadlineExceeded(DistlockError):
    """The call's deadline passed before an answer."""


_BY_CODE = {
    "aborted": NotAcquired,
    "not_found": NotHeld,
    "invalid_argument": InvalidArgument,
    "unauthenticated": Unauthenticated,
    "permission_denied": PermissionDenied,
    "resource_exhausted": ResourceExhausted,
    "unavailable": Unavailable,
    "deadline_exceeded": DeadlineExceeded,
}


def from_code(code, message):
    """Returns the exception of a Connect error code and message."""
    return _BY_CODE.get(code, DistlockError)(code, message)
