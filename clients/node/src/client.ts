// The client: locks, sessions, semaphores, read-write locks, elections.

import { randomUUID } from "node:crypto";
import { setMaxListeners } from "node:events";

import type { Duration } from "@bufbuild/protobuf/wkt";

import { DistlockError, InvalidArgument, LockLost, NoAnswer, NotAcquired, NotHeld, ReleaseRequested, type LossKind } from "./errors.js";
import type { Lock as LockMessage, LeaderResponse } from "./gen/distlock/v1/lock_pb.js";
import { LossWatch } from "./losswatch.js";
import { Rpc, abortReason, link, type CallBounds, type RequestOf, type ResponseOf, type UnaryMethod } from "./transport.js";

/**
 * The longest wait one call asks the service for; a longer wait is made of
 * such calls one after another (the service's --max-wait is 5 minutes).
 */
export const MAX_CALL_WAIT_MS = 60_000;

/**
 * How many times a call whose answer never came is sent again (with its
 * request id, which makes the retry return what the first call got).
 */
export const RETRIES = 3;

/** Options of a Client. */
export interface ClientOptions {
  /** The bearer token of a tenant's client; none against --insecure-no-auth. */
  token?: string;
  /** Bounds each call that does not wait, in milliseconds (10 s if unset). */
  timeoutMs?: number;
  /**
   * Makes its locks (session locks and election terms too) learn that they
   * were force-released or expired, or that somebody asked for them
   * (requestRelease), as soon as the service reports it, in milliseconds,
   * rather than at their next renewal (a third of the lease): the client
   * keeps one Watch stream of its tenant's keys open from its first lock to
   * close(). The stream counts against the tenant's streams
   * (--max-streams-per-tenant, 64 unless set) and carries every lock event
   * of the tenant, so share one client per process. It does not keep the
   * process running. The renewals go on as before, and tell a loss or a
   * request when the stream is down. Permits and read-write holds learn of
   * a loss at their renewal. Off unless set.
   */
  watchLoss?: boolean;
  /**
   * Caps the wait of one call, in milliseconds (MAX_CALL_WAIT_MS if unset):
   * a longer wait is made of several calls, and a lock keeps its place in
   * the key's queue from one to the next. Lower it behind a proxy that cuts
   * calls idle for a minute.
   */
  maxCallWaitMs?: number;
}

/** Options of an acquisition: a lock, a permit, a read-write hold, a term. */
export interface HoldOptions {
  /** How long the hold lasts without a renewal, in milliseconds (30 s if unset). */
  leaseMs?: number;
  /**
   * How long to wait while it is held by others, in milliseconds: undefined
   * waits until granted (in calls of at most a minute), 0 tries once.
   */
  waitMs?: number;
  /** Who holds it, for people reading inspect(). */
  owner?: string;
  /** What it protects (an order id, a job name), for the same readers. */
  businessId?: string;
  /** Free-form labels; names beginning "distlock." are reserved. */
  labels?: Record<string, string>;
  /** Called once if the hold is lost (also told by lock.signal). */
  onLost?: (lock: Lock, reason: LockLost) => void;
  /** Gives up waiting when it aborts: the acquisition throws its reason. */
  signal?: AbortSignal;
}

/** Options of client.lock(). */
export interface LockOptions extends HoldOptions {
  /** Ties the lock to a session: its KeepAlive keeps it, and it ends with it. leaseMs is then ignored. */
  session?: Session;
  /**
   * Called once if somebody asks the holder to release the lock
   * (client.requestRelease); also told by lock.requestSignal.
   */
  onReleaseRequested?: (lock: Lock, request: ReleaseRequested) => void;
}

/** Options of semaphore.acquire(). */
export interface PermitOptions extends HoldOptions {
  /**
   * How many permits to take as one hold (1 if unset): one Lock, one token,
   * fence and lease, renewed and released together. While a call of several
   * waits, no later call of the semaphore is granted permits, whatever its
   * count, so that a stream of small calls cannot starve it. 1 to the
   * semaphore's permits, else InvalidArgument before any call.
   */
  count?: number;
}

/** Options of client.session(). */
export interface SessionOptions {
  /** How long the session and its locks last without a KeepAlive, in milliseconds (15 s if unset). */
  ttlMs?: number;
  /** Called once if the session is lost, after each of its locks' onLost. */
  onLost?: (session: Session, reason: LockLost) => void;
}

/** What anyone allowed to read a key sees of it: never its token. */
export interface LockInfo {
  key: string;
  held: boolean;
  fence: bigint;
  /** The time the lease has left, as the store reports it, in milliseconds. */
  ttlMs: number;
  owner: string;
  businessId: string;
  labels: Record<string, string>;
  /** The tenant whose key it is (set in cross-tenant answers). */
  tenant: string;
  /** How many permits a semaphore's hold counts (PermitOptions.count); 0 means one, and a lock's is 0. */
  permits: number;
}

/** Who leads an election. */
export interface Leader {
  /** Whether anyone leads; the rest is empty if not (fence: that of the term that ended, in observe()). */
  held: boolean;
  value: string;
  fence: bigint;
  owner: string;
  /** The time the term has left, as the store reports it, in milliseconds. */
  ttlMs: number;
}

const DEFAULT_LEASE_MS = 30_000;
const DEFAULT_TTL_MS = 15_000;

/**
 * Bounds the withdrawal of an intent (a semaphore's call of several
 * permits, a read-write lock's writer) after a wait that failed: the
 * service ends the intent by itself 2 s after the wait's last call.
 */
const WITHDRAW_TIMEOUT_MS = 1_000;

/** The most names one path of lockPath names, as the Go client's MaxPathDepth. */
export const MAX_PATH_DEPTH = 16;

/** The longest key, in bytes, as the Go client's MaxKeyLen. */
const MAX_KEY_LEN = 512;

/**
 * Why key is no valid key (non-empty UTF-8 of at most MAX_KEY_LEN bytes
 * without control characters), as the Go client's ValidateKey; undefined if
 * it is one.
 */
function badKey(key: unknown): string | undefined {
  if (typeof key !== "string") return `a ${typeof key}, not a string`;
  if (key === "") return "empty";
  if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(key)) return "not valid UTF-8";
  const n = Buffer.byteLength(key);
  if (n > MAX_KEY_LEN) return `${n} bytes, the maximum is ${MAX_KEY_LEN}`;
  const control = /[\x00-\x1f\x7f-\x9f]/.exec(key);
  if (control) return `a control character at byte ${Buffer.byteLength(key.slice(0, control.index))}`;
  return undefined;
}

/** Throws InvalidArgument unless path has 1 to MAX_PATH_DEPTH valid keys without repeats. */
function checkPath(path: readonly string[]): void {
  if (!Array.isArray(path)) {
    throw new InvalidArgument("invalid_argument", `lock path ${JSON.stringify(path)}: want an array of names, root first`);
  }
  if (path.length < 1 || path.length > MAX_PATH_DEPTH) {
    throw new InvalidArgument("invalid_argument", `lock path: ${path.length} names, want 1 to ${MAX_PATH_DEPTH}`);
  }
  path.forEach((name, i) => {
    const why = badKey(name);
    if (why !== undefined) throw new InvalidArgument("invalid_argument", `lock path: name ${JSON.stringify(name)}: ${why}`);
    if (path.indexOf(name) < i) {
      throw new InvalidArgument("invalid_argument", `lock path: name ${JSON.stringify(name)}: the name is in the path twice`);
    }
  });
}

/** Protobuf's Duration of a number of milliseconds. */
export function duration(ms: number): Duration {
  if (!Number.isFinite(ms)) throw new RangeError(`duration ${ms}: want a finite number of milliseconds`);
  const ns = BigInt(Math.round(ms * 1e6));
  return { seconds: ns / 1_000_000_000n, nanos: Number(ns % 1_000_000_000n) } as Duration;
}

/** The milliseconds of a Duration (0 if unset). */
export function millis(d: Duration | undefined): number {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
}

function info(l: LockMessage | undefined): LockInfo {
  return {
    key: l?.key ?? "",
    held: l?.held ?? false,
    fence: l?.fence ?? 0n,
    ttlMs: millis(l?.ttl),
    owner: l?.owner ?? "",
    businessId: l?.businessId ?? "",
    labels: { ...(l?.labels ?? {}) },
    tenant: l?.tenant ?? "",
    permits: l?.permits ?? 0,
  };
}

function leader(l: LeaderResponse | undefined): Leader {
  return { held: l?.held ?? false, value: l?.value ?? "", fence: l?.fence ?? 0n, owner: l?.owner ?? "", ttlMs: millis(l?.ttl) };
}

function meta(o: HoldOptions) {
  return { owner: o.owner ?? "", businessId: o.businessId ?? "", labels: { ...(o.labels ?? {}) } };
}

const now = () => performance.now();

/**
 * A client of one lock service.
 *
 * url is the service's address (http://host:7070). Close it when done
 * (`await using client = new Client(...)` or `await client.close()`):
 * closing releases what it still holds and closes its sessions.
 */
export class Client implements AsyncDisposable {
  /** @internal */
  readonly rpc: Rpc;
  /** The longest wait of one call (ClientOptions.maxCallWaitMs). */
  readonly maxCallWaitMs: number;
  readonly #holds = new Set<Lock | Session>();
  readonly #closed = new AbortController();
  #closing: Promise<void> | undefined;
  /** @internal The loss watch, with watchLoss. */
  readonly lossWatch: LossWatch | undefined;

  constructor(url = "http://127.0.0.1:7070", options: ClientOptions = {}) {
    this.rpc = new Rpc(url, options.token, options.timeoutMs ?? 10_000);
    const maxCallWaitMs = options.maxCallWaitMs ?? MAX_CALL_WAIT_MS;
    if (!(maxCallWaitMs > 0)) throw new RangeError(`maxCallWaitMs ${maxCallWaitMs}: want more than 0 milliseconds`);
    this.maxCallWaitMs = maxCallWaitMs;
    setMaxListeners(Infinity, this.#closed.signal); // one for each wait and observer
    if (options.watchLoss) this.lossWatch = new LossWatch(this.rpc);
  }

  /** The bound of each call that does not wait, in milliseconds. */
  get timeoutMs(): number {
    return this.rpc.timeoutMs;
  }

  /** Aborted once close() is called: waits and observe() end with it. */
  get closedSignal(): AbortSignal {
    return this.#closed.signal;
  }

  /**
   * Makes one LockService call, request and answer as in the proto (for
   * what the rest of the client does not cover), bounded by the client's
   * timeout or bounds.timeoutMs.
   */
  call<K extends UnaryMethod>(method: K, request: RequestOf<K>, bounds?: CallBounds): Promise<ResponseOf<K>> {
    return this.rpc.unary(method, request, bounds);
  }

  /**
   * Takes key, waiting up to waitMs (undefined: until it is granted), and
   * returns a Lock that renews itself every leaseMs/3 until released.
   * Throws NotAcquired if the wait ends first.
   * `await using lk = await client.lock("orders/42")` releases it at the
   * block's end.
   */
  async lock(key: string, options: LockOptions = {}): Promise<Lock> {
    const session = options.session;
    const { grant: g, sentAt } = await this.acquire(
      "acquire",
      {
        key,
        lease: session ? undefined : duration(options.leaseMs ?? DEFAULT_LEASE_MS),
        sessionId: session?.id ?? "",
        ...meta(options),
      },
      options,
    );
    return this.adopt(
      () => new Lock(this, session ? SESSION_LOCK : LOCK, key, key, g, sentAt, options.onLost, session, options.onReleaseRequested),
    );
  }

  /**
   * Takes every one of keys, or none, and returns a LockSet, as the Go
   * client's LockAll does: the keys are tried without waiting in the byte
   * order of their names (UTF-8), whatever order keys gives. At the first
   * held elsewhere the keys taken after it are released and it is waited
   * for holding those before it, for HOLDING_WAIT_MS to twice that
   * (random); still held then, every key is released and it alone is
   * waited for. Then the rest are tried again with it kept. A caller that
   * holds keys waits only for a key after all of them, and only for a
   * bounded time, so sets that overlap never wait on each other in a cycle,
   * and a key waited for is usually kept, so sets complete even where every
   * key has waiters queued. A key whose try failed (not held elsewhere) is
   * waited for holding nothing. waitMs bounds the whole set (undefined:
   * until granted); NotAcquired names the key that stayed held, and nothing
   * stays taken. 1 to MAX_LOCK_ALL_KEYS keys without repeats, else
   * InvalidArgument.
   */
  async lockAll(keys: readonly string[], options: Omit<LockOptions, "session"> = {}): Promise<LockSet> {
    const ordered = [...keys].sort(byteOrder);
    if (keys.length < 1 || keys.length > MAX_LOCK_ALL_KEYS || new Set(keys).size !== keys.length) {
      throw new InvalidArgument(
        "invalid_argument",
        `lock all: ${keys.length} keys, want 1 to ${MAX_LOCK_ALL_KEYS} without repeats`,
      );
    }
    const deadline = options.waitMs === undefined ? undefined : now() + options.waitMs;
    const held = new Map<string, Lock>();
    for (;;) {
      let busy: string | undefined;
      let failed = false;
      for (const k of ordered) {
        if (held.has(k)) continue;
        try {
          held.set(k, await this.tryLock(k, options));
        } catch (e) {
          if (held.size === 0 && !(e instanceof NotAcquired)) throw e;
          busy = k;
          failed = !(e instanceof NotAcquired);
          break;
        }
      }
      if (busy === undefined) return new LockSet(ordered.map((k) => held.get(k) as Lock));
      held.set(busy, await this.waitForKey(ordered, held, busy, failed, deadline, options));
    }
  }

  /**
   * lockAll's wait for busy: holding the keys of held before it for a
   * bounded time, then (still held, or its try failed) holding nothing. On
   * error held is emptied.
   */
  private async waitForKey(
    ordered: readonly string[],
    held: Map<string, Lock>,
    busy: string,
    failed: boolean,
    deadline: number | undefined,
    options: Omit<LockOptions, "session">,
  ): Promise<Lock> {
    const take = (keep: (k: string) => boolean) => {
      const out = ordered.filter((k) => held.has(k) && !keep(k)).map((k) => held.get(k) as Lock);
      for (const k of ordered) if (!keep(k)) held.delete(k);
      return releaseAll(out);
    };
    const releaseEvery = () => take(() => false);
    const left = (until: number | undefined) => (until === undefined ? undefined : Math.max(0, until - now()));
    try {
      await take((k) => byteOrder(k, busy) < 0);
    } catch (e) {
      await releaseEvery().catch(() => undefined);
      throw e;
    }
    if (held.size > 0 && !failed) {
      let until = now() + HOLDING_WAIT_MS * (1 + Math.random());
      const cutByDeadline = deadline !== undefined && deadline <= until;
      if (cutByDeadline) until = deadline;
      try {
        return await this.lock(busy, { ...options, waitMs: left(until) });
      } catch (e) {
        if (cutByDeadline || options.signal?.aborted) {
          await releaseEvery().catch(() => undefined);
          throw e;
        }
      }
    }
    await releaseEvery();
    return this.lock(busy, { ...options, waitMs: left(deadline) });
  }

  /**
   * Takes the last node of path alone, in a tree of names: a hierarchical
   * lock, as the Go client's LockPath. path lists the node's ancestors
   * first, from the root: a table, then one of its rows (["orders",
   * "orders/42"]). Each ancestor is taken as a reader of its read-write lock
   * (an intention: a node below it is in use) and the node as the writer of
   * its own. So a lock of a table excludes every lock of its rows, waits for
   * those held to end and keeps new ones out meanwhile (a waiting writer
   * does), while locks of different rows run side by side and two of one row
   * exclude each other.
   *
   * Nodes are taken from the root down, each held while the next is waited
   * for; waitMs bounds the whole path (undefined: until granted), and on
   * failure (NotAcquired if a node stayed held, or the signal's reason) what
   * was taken is released. A name must have the same ancestors in every path
   * that names it: two callers whose paths order two names differently can
   * wait on each other until their waits end. Resolves with a LockSet of the
   * nodes' holds, root first: held is false once any is lost, fence(name)
   * gives each node's fence (the last node's is the one to give the
   * resource), release() releases them all. onLost is called for a node
   * whose hold is lost. path must list 1 to MAX_PATH_DEPTH names without
   * repeats, each a valid key, else InvalidArgument before any call.
   */
  lockPath(path: readonly string[], options: HoldOptions = {}): Promise<LockSet> {
    return this.takePath(path, true, options);
  }

  /**
   * lockPath() with the last node taken as a reader: readers of a node share
   * it and exclude its writers and those of its ancestors. A reader of an
   * inner node does not exclude writers below it (they too are readers of
   * it): to read a whole table while no row changes, take the table with
   * lockPath.
   */
  rLockPath(path: readonly string[], options: HoldOptions = {}): Promise<LockSet> {
    return this.takePath(path, false, options);
  }

  private async takePath(path: readonly string[], write: boolean, options: HoldOptions): Promise<LockSet> {
    checkPath(path);
    const { waitMs } = options;
    if (waitMs !== undefined && !(waitMs >= 0)) throw new RangeError(`waitMs ${waitMs}: want 0 or more milliseconds`);
    const deadline = waitMs === undefined ? undefined : now() + waitMs;
    const taken: Lock[] = [];
    try {
      for (const [i, name] of path.entries()) {
        const node = this.rwlock(name);
        const o = { ...options, waitMs: deadline === undefined ? undefined : Math.max(0, deadline - now()) };
        taken.push(await (write && i === path.length - 1 ? node.writeLock(o) : node.readLock(o)));
      }
    } catch (e) {
      await releaseAll(taken).catch(() => {}); // the acquisition's error is the one to throw
      throw e;
    }
    return new LockSet(taken);
  }

  /** lock() with no wait: NotAcquired at once if key is held. */
  tryLock(key: string, options: Omit<LockOptions, "waitMs"> = {}): Promise<Lock> {
    return this.lock(key, { ...options, waitMs: 0 });
  }

  /** Who holds key (no token). */
  async inspect(key: string): Promise<LockInfo> {
    return info((await this.rpc.unary("inspect", { key })).lock);
  }

  /**
   * Frees key whoever holds it, recording reason in the audit log (admin
   * role), and returns the holder it removed (held false if key was free).
   * Its holder learns at once if it follows the loss stream (watchLoss),
   * else at its next renewal.
   */
  async forceRelease(key: string, reason: string, options: { tenant?: string } = {}): Promise<LockInfo> {
    return info((await this.rpc.unary("forceRelease", { key, reason, tenant: options.tenant ?? "" })).lock);
  }

  /**
   * Asks the holder of key, a key of the client's tenant, to release it when
   * it can: the holder keeps the lock, and is told with reason (required,
   * at most 256 bytes) through its lock's requestSignal. It is told at once
   * if its client follows the loss stream (watchLoss), else at its next
   * renewal through the same service instance; a session lock only by the
   * stream. Returns the hold that was asked, as forceRelease does; throws
   * NotHeld if key is free (nobody was asked) and InvalidArgument for an
   * empty or long reason. Only the hold found now is asked: a later holder
   * of key is not.
   */
  async requestRelease(key: string, reason: string): Promise<LockInfo> {
    const lock = info((await this.rpc.unary("requestRelease", { key, reason })).lock);
    if (!lock.held) throw new NotHeld("not_found", `request release ${JSON.stringify(key)}: the key is not held: nobody was asked`);
    return lock;
  }

  /**
   * Opens a session that keeps itself alive every ttlMs/3: locks taken with
   * { session } share its TTL and end with it.
   */
  async session(options: SessionOptions = {}): Promise<Session> {
    this.checkOpen();
    const r = await this.rpc.unary("openSession", { ttl: duration(options.ttlMs ?? DEFAULT_TTL_MS) });
    return this.adopt(() => new Session(this, r.sessionId, millis(r.ttl) || (options.ttlMs ?? DEFAULT_TTL_MS), options.onLost));
  }

  /** A counting semaphore of permits permits. */
  semaphore(name: string, permits: number): Semaphore {
    return new Semaphore(this, name, permits);
  }

  /** A read-write lock. */
  rwlock(name: string): RWLock {
    return new RWLock(this, name);
  }

  /** A leader election, shared with the Go package election. */
  election(name: string): Election {
    return new Election(this, name);
  }

  /**
   * Releases what the client still holds (each within the timeout, all at
   * once), closes its sessions, ends its waits, observers and loss watch,
   * and closes its connections. Calling it again waits for the first.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed.abort(new DistlockError("canceled", "the client was closed"));
      await this.lossWatch?.close();
      const holds = [...this.#holds].filter((h) => !(h instanceof Lock && h.session));
      this.#holds.clear();
      await Promise.allSettled(holds.map((h) => (h instanceof Lock ? h.release() : h.close())));
      this.rpc.close();
    })();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * @internal Ends the intent of a wait that failed (method:
   * withdrawPermitIntent for several permits, withdrawIntent for a writer),
   * so that the calls it kept out get in now rather than when it lapses. Not
   * once the client is closed: its connections are gone.
   */
  async withdrawIntent(method: "withdrawPermitIntent" | "withdrawIntent", name: string, intent: string): Promise<void> {
    if (this.#closed.signal.aborted) return;
    await this.rpc.unary(method, { name, intent }, { timeoutMs: WITHDRAW_TIMEOUT_MS }).catch(() => {});
  }

  /** @internal */
  track(h: Lock | Session): void {
    this.#holds.add(h);
  }

  /** @internal */
  untrack(h: Lock | Session): void {
    this.#holds.delete(h);
  }

  private checkOpen(): void {
    if (this.#closed.signal.aborted) throw abortReason(this.#closed.signal);
  }

  /**
   * @internal Makes a hold just granted, unless the client closed
   * meanwhile: then it releases it and throws.
   */
  async adopt<T extends Lock | Session>(make: () => T): Promise<T> {
    const h = make();
    if (this.#closed.signal.aborted) {
      await (h instanceof Lock ? h.release() : (h as Session).close()).catch(() => {});
      throw abortReason(this.#closed.signal);
    }
    return h;
  }

  /**
   * @internal Acquires with a new request id, waiting up to waitMs
   * (undefined: until granted), in calls of at most maxCallWaitMs; a call
   * whose answer never came is sent again with the same request id. Returns
   * the grant and when the call that got it was sent.
   */
  async acquire<K extends "acquire" | "acquirePermit" | "acquireRW" | "campaign">(
    method: K,
    body: RequestOf<K>,
    options: { waitMs?: number; signal?: AbortSignal },
  ): Promise<{ grant: ResponseOf<K>; sentAt: number }> {
    this.checkOpen();
    const { waitMs } = options;
    if (waitMs !== undefined && !(waitMs >= 0)) throw new RangeError(`waitMs ${waitMs}: want 0 or more milliseconds`);
    const ctl = new AbortController(); // the caller's signal or close()
    const unlinkCaller = link(options.signal, ctl);
    const unlinkClose = link(this.#closed.signal, ctl);
    const req = { ...body, requestId: randomUUID() as string, firstTry: true as boolean } as unknown as RequestOf<K> & { wait?: Duration; firstTry: boolean };
    const deadline = waitMs === undefined ? undefined : now() + waitMs;
    let retries = 0;
    try {
      for (;;) {
        const left = deadline === undefined ? this.maxCallWaitMs : Math.max(0, deadline - now());
        const wait = Math.min(left, this.maxCallWaitMs);
        req.wait = wait > 0 ? duration(wait) : undefined;
        if (method === "acquire") {
          // A call that is not the wait's last says so, and the service
          // keeps the lock's place in line for the next.
          (req as { resumes?: boolean }).resumes = wait > 0 && (deadline === undefined || left > wait);
        }
        const sentAt = now();
        try {
          return { grant: await this.rpc.unary(method, req, { timeoutMs: wait + this.rpc.timeoutMs, signal: ctl.signal }), sentAt };
        } catch (e) {
          if (e instanceof NotAcquired) {
            if (deadline !== undefined && now() >= deadline) throw e;
            req.firstTry = true; // refused: no earlier call was granted
          } else if (e instanceof NoAnswer && !ctl.signal.aborted) {
            if (++retries > RETRIES) throw e;
            req.firstTry = false; // it may have been granted: ask again by id
          } else {
            throw e;
          }
        }
      }
    } finally {
      unlinkCaller();
      unlinkClose();
    }
  }
}

/** What a renewal answers: the lease granted, and a request to release, once, if one came. */
interface Renewed {
  lease?: Duration;
  releaseRequested?: string;
}

/** The calls that renew and release one kind of hold. */
interface Kind {
  /** Renews name's hold by token. undefined: it does not renew itself. */
  renew?: (rpc: Rpc, name: string, token: string, leaseMs: number, bounds: CallBounds) => Promise<Renewed>;
  release: (rpc: Rpc, name: string, token: string, bounds: CallBounds) => Promise<unknown>;
  /** The Watch stream tells of it, by its key and fence. */
  watched: boolean;
}

const LOCK: Kind = {
  renew: (rpc, key, token, ms, b) => rpc.unary("renew", { key, token, lease: duration(ms) }, b),
  release: (rpc, key, token, b) => rpc.unary("release", { key, token }, b),
  watched: true,
};
// A session's lock is renewed by the session's KeepAlive.
const SESSION_LOCK: Kind = { release: LOCK.release, watched: true };
const PERMIT: Kind = {
  renew: (rpc, name, token, ms, b) => rpc.unary("renewPermit", { name, token, lease: duration(ms) }, b),
  release: (rpc, name, token, b) => rpc.unary("releasePermit", { name, token }, b),
  watched: false,
};
const RW: Kind = {
  renew: (rpc, name, token, ms, b) => rpc.unary("renewRW", { name, token, lease: duration(ms) }, b),
  release: (rpc, name, token, b) => rpc.unary("releaseRW", { name, token }, b),
  watched: false,
};
// A term is renewed as its lock ("election/<name>") and ended by Resign.
const TERM: Kind = {
  renew: LOCK.renew,
  release: (rpc, name, token, b) => rpc.unary("resign", { name, token }, b),
  watched: true,
};

/**
 * Keeps a lease alive: a renewal every period/3, and the loss told when a
 * renewal is refused, or when none succeeded and only a tenth of the period
 * (at most a second) is left, so that the holder stops while the lease
 * still keeps others out.
 */
abstract class Keeper {
  readonly signal: AbortSignal;
  protected stopped = false;
  readonly #lost = new AbortController();
  #until = 0;
  #renewTimer: ReturnType<typeof setTimeout> | undefined;
  #expiryTimer: ReturnType<typeof setTimeout> | undefined;
  #inflight: AbortController | undefined;
  #again = false; // renew again as soon as the renewal in flight ends

  constructor(
    protected readonly client: Client,
    private readonly lossKey: string,
    private readonly periodMs: number,
  ) {
    this.signal = this.#lost.signal;
  }

  /** False once released (or closed) or lost. */
  get held(): boolean {
    return !this.stopped && !this.signal.aborted;
  }

  /** Renews once; returns the period granted (0: the one asked). */
  protected abstract renewOnce(bounds: CallBounds): Promise<number>;
  /** The words of a loss: by refusal, with the service's message, or by expiry. */
  protected abstract refusedWords(e: NotHeld): string;
  protected abstract expiredWords(): string;
  /** Tells the loss to whom it concerns; after signal aborted. */
  protected abstract told(reason: LockLost): void;

  private get margin(): number {
    return Math.min(this.periodMs / 10, 1000);
  }

  private get interval(): number {
    return Math.max(this.periodMs / 3, 50);
  }

  protected startKeeping(): void {
    this.#until = now() + this.periodMs;
    this.armExpiry();
    this.schedule(this.interval);
  }

  private armExpiry(): void {
    clearTimeout(this.#expiryTimer);
    this.#expiryTimer = setTimeout(() => this.lose("expired", this.expiredWords(), undefined), Math.max(0, this.#until - this.margin - now()));
  }

  private schedule(ms: number): void {
    this.#renewTimer = setTimeout(() => void this.renew(), ms);
  }

  /** @internal Renews now (or once the renewal in flight ends), if it renews itself. */
  check(): void {
    if (!this.held) return;
    if (this.#inflight) {
      this.#again = true;
    } else if (this.#renewTimer !== undefined) {
      clearTimeout(this.#renewTimer);
      this.schedule(0);
    }
  }

  private async renew(): Promise<void> {
    this.#renewTimer = undefined;
    if (!this.held) return;
    const sent = now();
    const ctl = (this.#inflight = new AbortController());
    try {
      // A renewal that hangs must not take the whole lease: retry sooner.
      const granted = await this.renewOnce({ signal: ctl.signal, timeoutMs: Math.min(this.client.timeoutMs, Math.max(this.interval, 100)) });
      if (!this.held) return;
      this.#until = sent + (granted || this.periodMs);
      this.armExpiry();
      this.schedule(this.#again ? 0 : this.interval);
    } catch (e) {
      if (!this.held) return;
      if (e instanceof NotHeld) {
        this.lose("refused", this.refusedWords(e), e);
        return;
      }
      // Retried until the expiry timer tells the loss.
      const left = this.#until - this.margin - now();
      this.schedule(Math.min(500, Math.max(left, 10)));
    } finally {
      if (this.#inflight === ctl) this.#inflight = undefined;
      this.#again = false;
    }
  }

  /** Stops the timers and the renewal in flight. */
  protected stopKeeping(): void {
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#expiryTimer);
    this.#renewTimer = this.#expiryTimer = undefined;
    this.#inflight?.abort();
  }

  /** @internal Tells the loss, once, unless released first. */
  lose(kind: LossKind, words: string, cause: unknown): void {
    if (!this.held) return;
    this.stopKeeping();
    const reason = new LockLost(kind, this.lossKey, words, { cause });
    this.#lost.abort(reason);
    this.told(reason);
  }
}

function callBack<T, R>(fn: ((h: T, r: R) => void) | undefined, h: T, r: R, what = "onLost"): void {
  if (!fn) return;
  try {
    fn(h, r);
  } catch (e) {
    process.emitWarning(`distlock: ${what} threw: ${e instanceof Error ? e.stack : String(e)}`);
  }
}

/**
 * A held lock, permit, read-write hold or election term.
 *
 * token proves it; fence strictly increases with every grant of the name:
 * pass it to what the lock guards. It renews itself every lease/3 until
 * released; if a renewal is refused (the lock was taken or force-released)
 * or none succeeds before the lease ends, it is lost: signal aborts with a
 * LockLost reason and onLost is called.
 *
 * When somebody asks the holder to let go (client.requestRelease), the lock
 * stays held and renewed: requestSignal aborts with a ReleaseRequested
 * reason, releaseReason says why and onReleaseRequested is called, once.
 * Finish the unit of work and release. A lock learns of it at its next
 * renewal, or at once with the client's watchLoss (a session lock only so:
 * its session's KeepAlive does not tell). Permits and read-write holds are
 * never asked.
 */
/** The most keys one lockAll takes, as the Go client's MaxLockAllKeys. */
export const MAX_LOCK_ALL_KEYS = 64;

/**
 * The shortest time lockAll waits for a held key while it holds the keys
 * before it, as the Go client's; each such wait adds a random part of as
 * much again.
 */
const HOLDING_WAIT_MS = 250;

/** Compares two keys in the byte order of their UTF-8 encodings. */
const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** Releases locks in reverse order, each tried even if one before failed; throws the first failure. */
async function releaseAll(locks: readonly Lock[]): Promise<void> {
  const results = [];
  for (const l of [...locks].reverse()) {
    results.push(await l.release().then(() => undefined, (e: unknown) => ({ e })));
  }
  const failed = results.find((r) => r !== undefined);
  if (failed) throw failed.e;
}

/**
 * Holds taken together, as one: by client.lockAll(), a Lock per key in the
 * byte order of the keys; by client.lockPath() or rLockPath(), a read-write
 * hold per node of the path, root first. held is false once any of them is
 * lost or released; release() releases them all, as does `await using`.
 */
export class LockSet implements AsyncDisposable {
  readonly locks: readonly Lock[];

  /** @internal */
  constructor(locks: readonly Lock[]) {
    this.locks = locks;
  }

  /** False once any lock of the set is lost or released. */
  get held(): boolean {
    return this.locks.every((l) => l.held);
  }

  /** The fence of key's lock (of a node's hold, for a path); a RangeError if key is not in the set. */
  fence(key: string): bigint {
    const l = this.locks.find((x) => x.key === key);
    if (!l) throw new RangeError(`${key} is not in the set`);
    return l.fence;
  }

  /**
   * Releases every lock of the set, in the reverse of its order (a path's
   * last node first); a failure is thrown once every release was tried.
   */
  async release(): Promise<void> {
    await releaseAll(this.locks);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

export class Lock extends Keeper implements AsyncDisposable {
  /** The key held: a lock's key, a semaphore's or read-write lock's name, a term's key ("election/<name>"). */
  readonly key: string;
  readonly token: string;
  readonly fence: bigint;
  /** The lease granted, in milliseconds (a session lock's: the session's TTL). */
  readonly leaseMs: number;
  /** The session it is tied to, if any. */
  readonly session: Session | undefined;
  /** @internal When the call that acquired it was sent. */
  readonly sentAt: number;
  /**
   * Aborts, with a ReleaseRequested reason, once somebody asks the holder to
   * release the lock; the lock is still held (signal tells a loss). Check
   * it between units of work, or pass it to a wait that should end then.
   */
  readonly requestSignal: AbortSignal;
  readonly #kind: Kind;
  readonly #releaseName: string;
  readonly #onLost: HoldOptions["onLost"];
  readonly #requested = new AbortController();
  readonly #onReleaseRequested: LockOptions["onReleaseRequested"];

  /** @internal */
  constructor(
    client: Client,
    kind: Kind,
    key: string,
    releaseName: string,
    grant: { token: string; fence: bigint; lease?: Duration },
    sentAt: number,
    onLost?: HoldOptions["onLost"],
    session?: Session,
    onReleaseRequested?: LockOptions["onReleaseRequested"],
  ) {
    const leaseMs = session ? session.ttlMs : millis(grant.lease) || DEFAULT_LEASE_MS;
    super(client, key, leaseMs);
    this.key = key;
    this.requestSignal = this.#requested.signal;
    this.#onReleaseRequested = onReleaseRequested;
    this.#kind = kind;
    this.#releaseName = releaseName;
    this.token = grant.token;
    this.fence = grant.fence;
    this.leaseMs = leaseMs;
    this.session = session;
    this.sentAt = sentAt;
    this.#onLost = onLost;
    client.track(this);
    if (kind.renew) this.startKeeping();
    else session?.follow(this);
    if (kind.watched) client.lossWatch?.follow(this);
  }

  protected async renewOnce(bounds: CallBounds): Promise<number> {
    const r = await this.#kind.renew!(this.client.rpc, this.key, this.token, this.leaseMs, bounds);
    if (r.releaseRequested) this.asked(r.releaseRequested); // sent once, by the instance the request went to
    return millis(r.lease);
  }

  /** @internal Whether it is a read-write lock's hold. */
  get readWrite(): boolean {
    return this.#kind === RW;
  }

  /** The requester's reason once somebody asked the holder to release the lock; undefined before. */
  get releaseReason(): string | undefined {
    return (this.requestSignal.reason as ReleaseRequested | undefined)?.reason;
  }

  /** @internal Tells that somebody asked the holder to release the lock, once, unless it was released or lost first. */
  asked(reason: string): void {
    if (!this.held || this.requestSignal.aborted) return;
    const request = new ReleaseRequested(this.key, reason);
    this.#requested.abort(request);
    callBack(this.#onReleaseRequested, this, request, "onReleaseRequested");
  }

  protected refusedWords(e: NotHeld): string {
    return `taken or released by another: ${e.message}`;
  }

  protected expiredWords(): string {
    return "expiring: no renewal succeeded within the lease";
  }

  protected told(reason: LockLost): void {
    this.client.lossWatch?.forget(this);
    callBack(this.#onLost, this, reason);
  }

  /** @internal Ended without a release of its own (its session closed). */
  end(): void {
    this.stopped = true;
    this.stopKeeping();
    this.client.untrack(this);
    this.client.lossWatch?.forget(this);
  }

  /**
   * Stops the renewals and frees the hold. Returns false if it was lost
   * already (the service no longer knew the token), or released before. A
   * call whose answer never came is sent again; after a loss, an error of
   * the call is not thrown (false is returned).
   */
  async release(): Promise<boolean> {
    if (this.stopped) return false;
    const wasLost = this.signal.aborted;
    this.end();
    this.session?.forget(this);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#kind.release(this.client.rpc, this.#releaseName, this.token, {});
        return true;
      } catch (e) {
        // After a lost answer, NotHeld may be the first call's doing: say
        // false all the same, as it may as well have been lost before.
        if (e instanceof NotHeld) return false;
        if (e instanceof NoAnswer && attempt < RETRIES) continue;
        if (wasLost) return false;
        throw e;
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** A session: locks tied to it share its TTL and one KeepAlive. */
export class Session extends Keeper implements AsyncDisposable {
  /** Names the session in calls. Keep it secret: it holds the session's locks. */
  readonly id: string;
  readonly ttlMs: number;
  readonly #locks = new Set<Lock>();
  readonly #onLost: SessionOptions["onLost"];

  /** @internal */
  constructor(client: Client, id: string, ttlMs: number, onLost?: SessionOptions["onLost"]) {
    super(client, "session", ttlMs);
    this.id = id;
    this.ttlMs = ttlMs;
    this.#onLost = onLost;
    client.track(this);
    this.startKeeping();
  }

  /** @internal */
  follow(lock: Lock): void {
    this.#locks.add(lock);
  }

  /** @internal */
  forget(lock: Lock): void {
    this.#locks.delete(lock);
  }

  protected async renewOnce(bounds: CallBounds): Promise<number> {
    return millis((await this.client.rpc.unary("keepAlive", { sessionId: this.id }, bounds)).ttl);
  }

  protected refusedWords(e: NotHeld): string {
    return `the session ended: ${e.message}`;
  }

  protected expiredWords(): string {
    return "expiring: no KeepAlive succeeded within the TTL";
  }

  protected told(reason: LockLost): void {
    for (const lk of this.#locks) lk.lose(reason.kind, reason.message, reason);
    callBack(this.#onLost, this, reason);
  }

  /** Ends the session and releases its locks. */
  async close(): Promise<void> {
    if (this.stopped) return;
    const wasLost = this.signal.aborted;
    this.stopped = true;
    this.stopKeeping();
    this.client.untrack(this);
    for (const lk of this.#locks) lk.end();
    this.#locks.clear();
    try {
      await this.client.rpc.unary("closeSession", { sessionId: this.id });
    } catch (e) {
      if (e instanceof NotHeld || wasLost) return;
      throw e;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** At most permits holders of name at once, each a Lock. */
export class Semaphore {
  constructor(
    private readonly client: Client,
    readonly name: string,
    public permits: number,
  ) {}

  /**
   * Takes a permit, waiting up to waitMs (undefined: until one is free);
   * NotAcquired if none came free.
   *
   * { count } > 1 takes that many permits as one hold: one Lock (one token,
   * fence and lease, renewed and released together) that counts count
   * permits (inspect() reports it as permits). While such a call waits, no
   * later call of the semaphore is granted permits, whatever its count, so
   * that a stream of small calls cannot starve it; the wait's calls carry an
   * intent id of its own that keeps them out between calls too, and a wait
   * that fails or is aborted withdraws it. A try (waitMs 0) keeps nobody
   * out. count must be 1 to permits, else InvalidArgument before any call. A
   * store that cannot take several permits in one hold (the service's
   * embedded store) refuses count > 1 with a DistlockError of code
   * "unimplemented".
   */
  async acquire(options: PermitOptions = {}): Promise<Lock> {
    const c = this.client;
    const count = options.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > this.permits) {
      throw new InvalidArgument(
        "invalid_argument",
        `semaphore ${JSON.stringify(this.name)}: count is ${String(count)}: want 1 to its ${this.permits} permits`,
      );
    }
    const intent = count > 1 && options.waitMs !== 0 ? randomUUID().replaceAll("-", "") : "";
    let got;
    try {
      got = await c.acquire(
        "acquirePermit",
        {
          name: this.name,
          permits: this.permits,
          count: count > 1 ? count : 0,
          intent,
          lease: duration(options.leaseMs ?? DEFAULT_LEASE_MS),
          ...meta(options),
        },
        options,
      );
    } catch (e) {
      if (intent) await c.withdrawIntent("withdrawPermitIntent", this.name, intent);
      throw e;
    }
    const { grant: g, sentAt } = got;
    return c.adopt(() => new Lock(c, PERMIT, this.name, this.name, g, sentAt, options.onLost));
  }

  /** acquire() with no wait. */
  tryAcquire(options: Omit<PermitOptions, "waitMs"> = {}): Promise<Lock> {
    return this.acquire({ ...options, waitMs: 0 });
  }

  /** Changes the number of permits, for every caller. */
  async setPermits(n: number): Promise<void> {
    await this.client.rpc.unary("setPermits", { name: this.name, permits: n });
    this.permits = n;
  }

  /** The number of permits (0 before any use) and the live permits (no tokens). */
  async inspect(): Promise<{ permits: number; held: LockInfo[] }> {
    const r = await this.client.rpc.unary("inspectPermits", { name: this.name });
    return { permits: r.permits, held: r.held.map(info) };
  }
}

/** Readers share name; a writer holds it alone, and keeps new readers out while it waits. */
export class RWLock {
  constructor(
    private readonly client: Client,
    readonly name: string,
  ) {}

  private async take(write: boolean, options: HoldOptions): Promise<Lock> {
    const c = this.client;
    // The service keeps new readers out while a writer's call waits; between
    // two calls of a long wait, the intent does (for 2 s after each).
    const intent = write && options.waitMs !== 0 ? randomUUID().replaceAll("-", "") : "";
    let got;
    try {
      got = await c.acquire(
        "acquireRW",
        { name: this.name, write, intent, lease: duration(options.leaseMs ?? DEFAULT_LEASE_MS), ...meta(options) },
        options,
      );
    } catch (e) {
      if (intent) await c.withdrawIntent("withdrawIntent", this.name, intent);
      throw e;
    }
    const { grant: g, sentAt } = got;
    return c.adopt(() => new Lock(c, RW, this.name, this.name, g, sentAt, options.onLost));
  }

  /** Takes a reader's hold. */
  readLock(options: HoldOptions = {}): Promise<Lock> {
    return this.take(false, options);
  }

  /**
   * Takes the writer's hold, waiting up to waitMs (undefined: until
   * granted). While it waits, no new reader gets in, so that a stream of
   * readers cannot starve it: the wait's calls carry an intent id of its own
   * that keeps readers out between calls too, and a wait that fails or is
   * aborted withdraws it. A try (waitMs 0) keeps nobody out.
   */
  writeLock(options: HoldOptions = {}): Promise<Lock> {
    return this.take(true, options);
  }

  /**
   * Turns lock, the writer's hold of this read-write lock, into a reader's,
   * with no moment in which another writer could get in: readers may join
   * it at once, and lock carries on as the reader's hold, with its token,
   * fence and lease, renewed as before. A reader's hold stays as it is.
   * Rejects with NotHeld if lock was released or lost (the service no longer
   * knows its token; a loss is then told at once), InvalidArgument if lock
   * is no hold of this read-write lock.
   */
  async downgrade(lock: Lock): Promise<void> {
    if (!(lock instanceof Lock) || !lock.readWrite || lock.key !== this.name) {
      throw new InvalidArgument(
        "invalid_argument",
        `downgrade ${JSON.stringify(this.name)}: want a hold of this read-write lock, from its writeLock()`,
      );
    }
    if (!lock.held) throw new NotHeld("not_found", `downgrade ${JSON.stringify(this.name)}: the hold was released or lost`);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.client.rpc.unary("downgradeRW", { name: this.name, token: lock.token });
        return;
      } catch (e) {
        if (e instanceof NotHeld) lock.check(); // its renewal is refused too, and tells the loss
        // A second downgrade of one hold changes nothing: send it again.
        if (e instanceof NoAnswer && attempt < RETRIES) continue;
        throw e;
      }
    }
  }

  /** Whether the holds are the writer's, the live holds (no tokens), and the writers waiting. */
  async inspect(): Promise<{ writer: boolean; held: LockInfo[]; writersWaiting: number }> {
    const r = await this.client.rpc.unary("inspectRW", { name: this.name });
    return { writer: r.writer, held: r.held.map(info), writersWaiting: r.writersWaiting };
  }
}

/** Options of election.campaign(): those of a hold, less businessId and labels, and onReleaseRequested. */
export type CampaignOptions = Omit<HoldOptions, "businessId" | "labels"> & Pick<LockOptions, "onReleaseRequested">;

/** A leader election: one candidate leads at a time. */
export class Election {
  constructor(
    private readonly client: Client,
    readonly name: string,
  ) {}

  /**
   * Waits to lead, up to waitMs (undefined: until leading), and returns the
   * term: a Lock, renewed in the background, whose release resigns. A
   * request to release the term's key ("election/<name>") is a request to
   * resign: the term keeps leading until it does.
   */
  async campaign(value: string, options: CampaignOptions = {}): Promise<Lock> {
    const c = this.client;
    const { grant: g, sentAt } = await c.acquire(
      "campaign",
      { name: this.name, value, lease: duration(options.leaseMs ?? DEFAULT_LEASE_MS), owner: options.owner ?? "" },
      options,
    );
    return c.adopt(() => new Lock(c, TERM, g.key, this.name, g, sentAt, options.onLost, undefined, options.onReleaseRequested));
  }

  /** Who leads (held false if nobody). */
  async leader(): Promise<Leader> {
    return leader(await this.client.rpc.unary("leader", { name: this.name }));
  }

  /**
   * The leader now, then each change (held false when a term ends and
   * nobody leads yet), until signal aborts or the client closes: then the
   * iteration ends. A stream that the service ends after it served for a
   * second or more (at its --max-stream-lifetime) is opened again, without
   * repeating the leader last seen; otherwise an error of the stream is
   * thrown (Unavailable when the service is down).
   */
  async *observe(options: { signal?: AbortSignal } = {}): AsyncGenerator<Leader, void, undefined> {
    const ctl = new AbortController();
    const unlinkCaller = link(options.signal, ctl);
    const unlinkClose = link(this.client.closedSignal, ctl);
    let last: Leader | undefined;
    try {
      for (;;) {
        const opened = now();
        let got = 0;
        try {
          for await (const msg of this.client.rpc.stream("observe", { name: this.name }, ctl.signal)) {
            got++;
            const l = leader(msg.leader);
            // A reopened stream starts with the leader now: no news if seen.
            if (last && (l.fence < last.fence || (l.fence === last.fence && l.held === last.held))) continue;
            last = l;
            yield l;
          }
        } catch (e) {
          const ended = e instanceof DistlockError && e.code === "unavailable";
          if (!ended || got === 0 || now() - opened < 1000) throw e;
          continue;
        }
        if (ctl.signal.aborted || got === 0 || now() - opened < 1000) return;
      }
    } finally {
      unlinkCaller();
      unlinkClose();
      ctl.abort();
    }
  }
}
