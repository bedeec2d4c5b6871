// The loss watch: one Watch stream per client that tells its locks at once
// when the service reports them force-released or expired, or asked to be
// released.

import { Event_Type, type Event } from "./gen/distlock/v1/lock_pb.js";
import type { Rpc } from "./transport.js";

/**
 * The pause before opening the stream again: doubled after each attempt
 * that failed or lived less than BACKOFF_RESET_MS, from BACKOFF_MIN_MS up
 * to BACKOFF_MAX_MS, and drawn at random in its upper half.
 */
export const BACKOFF_MIN_MS = 50;
export const BACKOFF_MAX_MS = 5_000;
export const BACKOFF_RESET_MS = 1_000;

/** The header of a Watch stream that has begun. */
const LIVE_HEADER = "Distlock-Watch-Live";

const losses: Partial<Record<Event_Type, string>> = {
  [Event_Type.FORCE_RELEASED]: "force-released: told by the service's event stream",
  [Event_Type.EXPIRED]: "expired at the service: told by its event stream",
};

/** @internal What the loss watch needs of a lock. */
export interface Followed {
  readonly key: string;
  readonly fence: bigint;
  /** When the call that acquired it was sent (performance.now()). */
  readonly sentAt: number;
  /** Renews now, if it renews itself, so that a refusal tells a loss the stream missed. */
  check(): void;
  /** Tells the loss, once, unless released first. */
  lose(kind: "refused", words: string, cause: unknown): void;
  /** Tells that somebody asked the holder to release it, once, unless released or lost first. */
  asked(reason: string): void;
}

const now = () => performance.now();

/**
 * @internal Follows one Watch stream of the tenant's keys, from the
 * client's first followed lock to close(), and tells a lock that the stream
 * reports force-released or expired (a loss), or asked to be released (the
 * lock is still held).
 *
 * An event is about a lock's hold when it names the lock's key and fence:
 * the fence is unique to each grant of a key, so a late event about an
 * earlier hold of the key (its release, expiry or forced release) never
 * ends a later one. A release is no loss, but a lock stops being followed
 * before it releases: told of its release, one still followed renews at
 * once. Events missed while the stream is not live (before it
 * first opens, while it is opened again) are not replayed: when it goes
 * live, each lock granted before that renews at once, so that a loss
 * meanwhile is told by the refused renewal.
 */
export class LossWatch {
  readonly #rpc: Rpc;
  readonly #held = new Map<string, Map<bigint, Followed>>(); // key, then fence: an entry per followed lock
  readonly #ctl = new AbortController();
  #running: Promise<void> | undefined;
  #liveAt: number | undefined; // when the current stream went live; undefined if none is
  /** Streams that went live, for tests and diagnostics. */
  opened = 0;

  constructor(rpc: Rpc) {
    this.#rpc = rpc;
  }

  /** Whether a stream is live. */
  get live(): boolean {
    return this.#liveAt !== undefined;
  }

  /** Tells lock of its loss from now on; starts the stream if need be. */
  follow(lock: Followed): void {
    if (this.#ctl.signal.aborted) return;
    let byFence = this.#held.get(lock.key);
    if (!byFence) this.#held.set(lock.key, (byFence = new Map()));
    byFence.set(lock.fence, lock);
    this.#running ??= this.run();
    // Live since before the acquisition was sent: any loss is to come. Live
    // since: the stream may have missed it. Not live: checked when it goes live.
    if (this.#liveAt !== undefined && this.#liveAt > lock.sentAt) lock.check();
  }

  /** Stops following lock (released or lost). */
  forget(lock: Followed): void {
    const byFence = this.#held.get(lock.key);
    if (byFence?.get(lock.fence) !== lock) return;
    byFence.delete(lock.fence);
    if (byFence.size === 0) this.#held.delete(lock.key);
  }

  /** Ends the stream and waits for it. */
  async close(): Promise<void> {
    this.#ctl.abort();
    this.#held.clear();
    await this.#running;
  }

  private async run(): Promise<void> {
    const signal = this.#ctl.signal;
    let failures = 0;
    while (!signal.aborted) {
      const started = now();
      try {
        // The service sends LIVE_HEADER once the stream has begun (a
        // refused one ends at once, without it): every change after it is told.
        const onHeader = (h: Headers) => h.has(LIVE_HEADER) && this.wentLive();
        const stream = this.#rpc.stream("watch", {}, signal, { onHeader, background: true });
        for await (const msg of stream) this.event(msg.event);
      } catch {
        // Refused, unreachable, over the tenant's cap, ended by the service
        // (its lifetime, a restart) or cut: opened again after a pause.
      }
      this.#liveAt = undefined;
      if (signal.aborted) return;
      if (now() - started >= BACKOFF_RESET_MS) failures = 0;
      const pause = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** failures);
      failures = Math.min(failures + 1, 16);
      await sleep(pause / 2 + (Math.random() * pause) / 2, signal);
    }
  }

  private wentLive(): void {
    if (this.#ctl.signal.aborted) return;
    const at = now();
    this.#liveAt = at;
    this.opened++;
    for (const byFence of this.#held.values()) {
      for (const lock of byFence.values()) if (lock.sentAt < at) lock.check();
    }
  }

  private event(ev: Event | undefined): void {
    if (!ev?.lock) return;
    const words = losses[ev.type];
    if (!words && ev.type !== Event_Type.RELEASE_REQUESTED && ev.type !== Event_Type.RELEASED) return;
    const lock = this.#held.get(ev.lock.key)?.get(ev.lock.fence);
    if (!lock) return;
    // A lock stops being followed before it releases: a release of one
    // still followed is an end the service could not explain (or another
    // holder of its token's doing). It renews at once; a refusal tells.
    if (ev.type === Event_Type.RELEASED) lock.check();
    else if (words) lock.lose("refused", words, undefined);
    else lock.asked(ev.reason);
  }
}

/** Resolves after ms, or at once when signal aborts; keeps no process running. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    timer.unref();
    signal.addEventListener("abort", done, { once: true });
  });
}
