// @distlock/client: locks, semaphores, read-write locks, sessions and
// leader election from a distlock lock service (`distlock serve`), over
// Connect's protocol.
//
//     import { Client } from "@distlock/client";
//
//     await using client = new Client("http://127.0.0.1:7070", { token });
//     await using lk = await client.lock("orders/42", { leaseMs: 30_000 });
//     await charge(order, { fence: lk.fence, signal: lk.signal });
//
// A lock renews itself every third of its lease; a refused renewal, or a
// lease about to run out with no renewal, aborts lk.signal (its reason a
// LockLost) and calls onLost. With new Client(url, { watchLoss: true }) a
// forced release or an expiry is told as soon as the service reports it,
// in milliseconds, from one event stream per client. Pass lk.fence to what the lock guards, so
// that it can refuse a holder that lost the lock without knowing (a paused
// process). client.requestRelease(key, reason) asks a key's holder to let
// go: the lock stays held, and its requestSignal aborts (a ReleaseRequested)
// at its next renewal, or at once with watchLoss.

export {
  Client,
  Election,
  Lock,
  LockSet,
  RWLock,
  Semaphore,
  Session,
  MAX_CALL_WAIT_MS,
  MAX_LOCK_ALL_KEYS,
  MAX_PATH_DEPTH,
  RETRIES,
  type CampaignOptions,
  type ClientOptions,
  type HoldOptions,
  type Leader,
  type LockInfo,
  type LockOptions,
  type PermitOptions,
  type SessionOptions,
} from "./client.js";
export {
  DeadlineExceeded,
  DistlockError,
  InvalidArgument,
  LockLost,
  NoAnswer,
  NotAcquired,
  NotHeld,
  PermissionDenied,
  ReleaseRequested,
  ResourceExhausted,
  Unauthenticated,
  Unavailable,
  type LossKind,
} from "./errors.js";
export type { CallBounds, RequestOf, ResponseOf, UnaryMethod } from "./transport.js";
