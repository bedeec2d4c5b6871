// Asking a holder to let go (requestRelease): the holder keeps its lock and
// is told at once when its client follows the loss stream ({ watchLoss:
// true }), else at its next renewal; a free key, a bad reason and a later
// holder of the key are not asked.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Event_Type } from "../src/gen/distlock/v1/lock_pb.js";
import { Client, InvalidArgument, NotHeld, PermissionDenied, ReleaseRequested, type Lock } from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

// How soon a holder following the stream must be told; measured on a 2-core
// machine: a few ms.
const TOLD_WITHIN_MS = 500;

let svc: Service;

before(async () => {
  svc = await startService();
});

after(async () => {
  await svc?.stop();
});

const key = () => "node-request/" + randomUUID();
const T = { timeout: 20_000 };

/**
 * Clients of tenant alpha, closed when fn ends: one following the loss
 * stream, one not, and one that asks.
 */
async function withClients(fn: (watching: Client, plain: Client, asker: Client) => Promise<void>): Promise<void> {
  const watching = new Client(svc.url, { token: TOKENS.alpha, watchLoss: true });
  const plain = new Client(svc.url, { token: TOKENS.alpha });
  const asker = new Client(svc.url, { token: TOKENS.alpha });
  try {
    await fn(watching, plain, asker);
  } finally {
    await Promise.all([watching.close(), plain.close(), asker.close()]);
  }
}

/** Opens c's loss stream (at its first lock) and waits until it is live. */
async function warm(c: Client): Promise<void> {
  await (await c.tryLock(key())).release();
  const deadline = performance.now() + 5000;
  while (!c.lossWatch!.live) {
    assert.ok(performance.now() < deadline, "the loss stream did not go live within 5 s");
    await sleep(10);
  }
}

/** Asks lk's holder to let go; resolves with how long it took to be told. */
async function asked(asker: Client, lk: Lock, reason: string, within: number): Promise<number> {
  const start = performance.now();
  const told = new Promise<number>((resolve) =>
    lk.requestSignal.addEventListener("abort", () => resolve(performance.now() - start), { once: true }),
  );
  const got = await asker.requestRelease(lk.key, reason);
  assert.ok(got.held);
  assert.equal(got.fence, lk.fence);
  const late = new AbortController();
  try {
    return await Promise.race([
      told,
      sleep(within, undefined, { signal: late.signal }).then(() => assert.fail(`the holder of ${lk.key} was not told within ${within} ms`)),
    ]);
  } finally {
    late.abort(); // the timer must not keep the test's process running
  }
}

test("a holder following the stream is told at once, and keeps its lock", T, (t) =>
  withClients(async (watching, _plain, asker) => {
    await warm(watching);
    const calls: string[] = [];
    const took: number[] = [];
    const warnings: string[] = [];
    t.mock.method(process, "emitWarning", (w: string) => void warnings.push(w));
    for (let i = 0; i < 10; i++) {
      const lk = await watching.lock(key(), {
        leaseMs: 30_000,
        onReleaseRequested: (l, request) => {
          assert.equal(l, lk);
          calls.push(request.reason);
          if (calls.length === 1) throw new Error("an onReleaseRequested that throws stops no other notice");
        },
      });
      assert.ok(!lk.requestSignal.aborted);
      assert.equal(lk.releaseReason, undefined);
      took.push(await asked(asker, lk, `deploy ${i}`, 5000));
      const request = lk.requestSignal.reason as ReleaseRequested;
      assert.ok(request instanceof ReleaseRequested);
      assert.equal(request.key, lk.key);
      assert.equal(lk.releaseReason, `deploy ${i}`);
      assert.throws(() => lk.requestSignal.throwIfAborted(), ReleaseRequested);
      assert.ok(lk.held && !lk.signal.aborted, "asked, not taken");
      assert.ok((await asker.inspect(lk.key)).held);
      assert.ok(await lk.release());
    }
    assert.deepEqual(calls, Array.from({ length: 10 }, (_, i) => `deploy ${i}`));
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /^distlock: onReleaseRequested threw: Error: an onReleaseRequested that throws/);
    took.sort((a, b) => a - b);
    t.diagnostic(`request to release told by the stream after ${took[5].toFixed(1)} ms (median), ${took[9].toFixed(1)} ms (max) of 10`);
    assert.ok(took[9] < TOLD_WITHIN_MS, `told after ${took.join(", ")} ms`);
  }),
);

test("a holder without the stream is told at its next renewal", T, (t) =>
  withClients(async (_watching, plain, asker) => {
    // A 3 s lease renews every second: the request is told within one.
    const calls: Lock[] = [];
    const lk = await plain.lock(key(), { leaseMs: 3000, onReleaseRequested: (l) => calls.push(l) });
    const ms = await asked(asker, lk, "rebalancing", 3000);
    t.diagnostic(`request to release told by a renewal after ${ms.toFixed(0)} ms (renewal every 1 s)`);
    assert.ok(ms < 1900, `told after ${ms} ms`); // the first renewal, not the second
    assert.equal(lk.releaseReason, "rebalancing");
    assert.deepEqual(calls, [lk]);
    assert.ok(lk.held);
    assert.ok(await lk.release());
  }),
);

test("a holder told by the stream and its renewal hears it once", T, () =>
  withClients(async (watching, _plain, asker) => {
    // The service keeps the request for the renewal too: the holder hears
    // it once, with the first reason.
    await warm(watching);
    const calls: string[] = [];
    const lk = await watching.lock(key(), { leaseMs: 1500, onReleaseRequested: (_l, r) => calls.push(r.reason) });
    await asked(asker, lk, "first", TOLD_WITHIN_MS);
    await asker.requestRelease(lk.key, "second");
    await sleep(700); // past a renewal (every 0.5 s)
    assert.deepEqual(calls, ["first"]);
    assert.equal(lk.releaseReason, "first");
    assert.ok(lk.held);
    assert.ok(await lk.release());
  }),
);

test("session locks and election terms are told by the stream", T, () =>
  withClients(async (watching, _plain, asker) => {
    await warm(watching);
    {
      await using s = await watching.session({ ttlMs: 15_000 });
      const sl = await watching.lock(key(), { session: s });
      assert.ok((await asked(asker, sl, "session lock", TOLD_WITHIN_MS)) < TOLD_WITHIN_MS);
      assert.ok(sl.held && s.held);
    }
    let told: string | undefined;
    const term = await watching.election(key()).campaign("10.0.0.1", { leaseMs: 30_000, onReleaseRequested: (_l, r) => (told = r.reason) });
    assert.ok((await asked(asker, term, "resign, please", TOLD_WITHIN_MS)) < TOLD_WITHIN_MS);
    assert.equal(told, "resign, please");
    assert.ok(term.held);
    assert.ok(await term.release());
  }),
);

test("a free key is NotHeld; a bad reason is InvalidArgument and asks nobody", T, () =>
  withClients(async (watching, _plain, asker) => {
    await assert.rejects(asker.requestRelease(key(), "nobody holds it"), NotHeld);
    const lk = await watching.lock(key(), { leaseMs: 30_000 });
    for (const bad of ["", "   ", "x".repeat(257)]) {
      await assert.rejects(asker.requestRelease(lk.key, bad), InvalidArgument, JSON.stringify(bad));
    }
    await assert.rejects(asker.requestRelease("bad\u0000key", "a reason"), InvalidArgument);
    const beta = new Client(svc.url, { token: TOKENS.beta });
    const viewer = new Client(svc.url, { token: TOKENS.viewer });
    try {
      await assert.rejects(beta.requestRelease(lk.key, "another tenant"), NotHeld); // beta's key of that name is free
      await assert.rejects(viewer.requestRelease(lk.key, "a viewer may not"), PermissionDenied);
    } finally {
      await Promise.all([beta.close(), viewer.close()]);
    }
    // Nothing asked so far: the first request told is the valid one.
    await asked(asker, lk, "x".repeat(256), 5000);
    assert.equal(lk.releaseReason, "x".repeat(256));
    assert.ok(await lk.release());
    await assert.rejects(asker.requestRelease(lk.key, "released already"), NotHeld);
  }),
);

test("the next holder of the key is not told", T, () =>
  withClients(async (watching, _plain, asker) => {
    // The holder asked releases before any renewal, so the service still
    // keeps the request for one. The next holder of the key renews every
    // half second and follows the stream, and is told neither by a renewal
    // nor by the request's event, even one that came late.
    await warm(watching);
    const k = key();
    const a = await watching.lock(k, { leaseMs: 30_000 });
    const waiting = watching.lock(k, { leaseMs: 1500, waitMs: 10_000 });
    await asked(asker, a, "let b in", TOLD_WITHIN_MS);
    assert.ok(await a.release());
    const b = await waiting;
    assert.ok(b.fence > a.fence);
    // The request's event, as if it came after b's grant.
    const watch = watching.lossWatch as unknown as { event(ev: unknown): void };
    watch.event({ type: Event_Type.RELEASE_REQUESTED, reason: "let b in", lock: { key: k, held: true, fence: a.fence } });
    await sleep(1200); // two renewals
    assert.ok(!b.requestSignal.aborted && b.releaseReason === undefined && b.held);
    assert.ok(await b.release());
  }),
);
