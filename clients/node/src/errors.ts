// The errors of the lock service, as classes.
//
// Each mirrors a Go sentinel or a Connect code: NotAcquired is
// ErrNotAcquired (ABORTED), NotHeld is ErrNotHeld (NOT_FOUND),
// InvalidArgument is ErrInvalidKey / ErrInvalidOption (INVALID_ARGUMENT).
// Every one is a DistlockError, which carries the service's code and
// message.

import { Code, ConnectError } from "@connectrpc/connect";

/** An error of the lock service: code is Connect's ("aborted", ...). */
export class DistlockError extends Error {
  /** Connect's name of the code, in snake case: "aborted", "not_found", ... */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  override get name(): string {
    return this.constructor.name;
  }
}

/** The lock (permit, hold, term) was not granted within the wait. */
export class NotAcquired extends DistlockError {}

/** The token no longer holds it: released, expired or taken. */
export class NotHeld extends DistlockError {}

/** A bad key, lease, wait, label or token; nothing was changed. */
export class InvalidArgument extends DistlockError {}

/** The bearer token is missing or unknown. */
export class Unauthenticated extends DistlockError {}

/** The token's role does not allow the call. */
export class PermissionDenied extends DistlockError {}

/** Over a limit the service names: a rate, a cap of waiters or streams. */
export class ResourceExhausted extends DistlockError {}

/** The service or its store cannot answer now (or it is shutting down). */
export class Unavailable extends DistlockError {}

/**
 * The call was sent and no answer came: it may have taken effect.
 * Acquisitions are retried with their request id, which makes the retry
 * return what the first call got.
 */
export class NoAnswer extends Unavailable {}

/** The call's deadline passed before an answer. */
export class DeadlineExceeded extends DistlockError {}

/** Why a hold was lost: see LockLost. */
export type LossKind = "refused" | "expired";

/**
 * The reason of a lost hold's signal (lock.signal.reason) and the argument
 * of onLost. kind "refused": a renewal (or its session's KeepAlive) was
 * refused, because the hold was taken, force-released or ended at the
 * service; or, with the client's watchLoss, the service's event stream
 * reported the hold force-released or expired (the message begins
 * "force-released" or "expired"). kind "expired": no renewal succeeded while the lease lasted
 * (the service is down or cut off), and the loss is told a tenth of the
 * lease (at most a second) before the lease ends. cause is the last error
 * of the calls that failed.
 */
export class LockLost extends Error {
  readonly kind: LossKind;
  /** The key (semaphore, read-write lock, term's key) that was lost. */
  readonly key: string;

  constructor(kind: LossKind, key: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.key = key;
  }

  override get name(): string {
    return "LockLost";
  }
}

/**
 * The reason of a lock's requestSignal and the argument of
 * onReleaseRequested: somebody asked the holder to release the lock
 * (client.requestRelease). The lock is still held and renewed: finish the
 * unit of work in hand and release it. reason is the requester's words.
 */
export class ReleaseRequested extends Error {
  /** The key (a term's key, "election/<name>") whose holder was asked. */
  readonly key: string;
  /** Why, in the requester's words. */
  readonly reason: string;

  constructor(key: string, reason: string) {
    super(`release requested: ${reason}`);
    this.key = key;
    this.reason = reason;
  }

  override get name(): string {
    return "ReleaseRequested";
  }
}

const byCode: Partial<Record<Code, new (code: string, message: string, options?: { cause?: unknown }) => DistlockError>> = {
  [Code.Aborted]: NotAcquired,
  [Code.NotFound]: NotHeld,
  [Code.InvalidArgument]: InvalidArgument,
  [Code.Unauthenticated]: Unauthenticated,
  [Code.PermissionDenied]: PermissionDenied,
  [Code.ResourceExhausted]: ResourceExhausted,
  [Code.Unavailable]: Unavailable,
  [Code.DeadlineExceeded]: DeadlineExceeded,
};

/** Connect's snake-case name of a code: Code.NotFound is "not_found". */
export function codeName(code: Code): string {
  return (Code[code] ?? "unknown").replace(/[A-Z]/g, (c, i: number) => (i ? "_" : "") + c.toLowerCase());
}

/** The DistlockError of an error the service answered with. */
export function fromConnect(e: ConnectError): DistlockError {
  const cls = byCode[e.code] ?? DistlockError;
  return new cls(codeName(e.code), e.rawMessage, { cause: e });
}
