// Holds of several permits (semaphore.acquire({ count })) against a real
// service of their own, over its embedded store: one hold counts n permits, and a waiting call of several
// keeps later calls out, between its calls too, until it gets in or gives up.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, InvalidArgument, NotAcquired, type LockInfo } from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

let svc: Service;

before(async () => {
  svc = await startService();
});

after(async () => {
  await svc?.stop();
});

const key = () => "node-weighted/" + randomUUID();
const T = { timeout: 20_000 };

/** Clients of tenant alpha whose waits are made of calls of 500 ms, closed when the test ends. */
async function withClients(n: number, fn: (...c: Client[]) => Promise<void>): Promise<void> {
  const clients = Array.from({ length: n }, () => new Client(svc.url, { token: TOKENS.alpha, maxCallWaitMs: 500 }));
  try {
    await fn(...clients);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/** Records a client's acquirePermit and withdrawPermitIntent calls: the requests sent, and a first refusal. */
function record(c: Client) {
  const sent: { count?: number; intent?: string }[] = [];
  const withdrawn: { name?: string; intent?: string }[] = [];
  let refused!: () => void;
  const firstRefusal = new Promise<void>((resolve) => (refused = resolve));
  const unary = c.rpc.unary.bind(c.rpc);
  c.rpc.unary = (async (method: string, req: object, bounds: object) => {
    if (method === "acquirePermit") sent.push({ ...req });
    else if (method === "withdrawPermitIntent") withdrawn.push({ ...req });
    try {
      return await (unary as (m: string, r: object, b: object) => Promise<unknown>)(method, req, bounds);
    } catch (e) {
      if (e instanceof NotAcquired) refused();
      throw e;
    }
  }) as typeof c.rpc.unary;
  return { sent, withdrawn, firstRefusal };
}

/** How many permits a hold counts: 0 means one. */
const countOf = (h: LockInfo) => h.permits || 1;

test("a hold of several permits counts them all, and renews and releases as one", T, () =>
  withClients(2, async (a, b) => {
    const name = key();
    const sem = a.semaphore(name, 3);
    const theirs = b.semaphore(name, 3);
    const two = await sem.acquire({ count: 2, leaseMs: 1500, waitMs: 5000 });
    let seen = await sem.inspect();
    assert.equal(seen.permits, 3);
    assert.deepEqual(seen.held.map(countOf), [2]);
    assert.equal(seen.held[0].fence, two.fence);
    await assert.rejects(theirs.acquire({ count: 2, waitMs: 0 }), NotAcquired); // 1 free
    const one = await theirs.tryAcquire(); // fits beside: a refused try keeps nobody out
    await assert.rejects(theirs.tryAcquire(), NotAcquired); // 3 of 3 held
    await sleep(2000); // past its lease: only the renewals keep the hold of 2
    assert.ok(two.held);
    seen = await sem.inspect();
    assert.deepEqual(seen.held.map(countOf).sort(), [1, 2]);
    assert.equal(await two.release(), true); // both permits at once
    const again = await theirs.tryAcquire({ count: 2 });
    assert.ok(again.fence > one.fence);
    for (const h of [again, one]) assert.equal(await h.release(), true);
    assert.equal((await sem.inspect()).held.length, 0);
  }),
);

test("a waiting call of several keeps later calls out, between its calls too, then gets in", T, () =>
  withClients(3, async (holder, big, small) => {
    const name = key();
    const h1 = await holder.semaphore(name, 3).tryAcquire();
    const h2 = await holder.semaphore(name, 3).tryAcquire();
    const calls = record(big);
    const waiting = big.semaphore(name, 3).acquire({ count: 3, waitMs: 20_000 });
    waiting.catch(() => {}); // awaited below
    try {
      await Promise.race([calls.firstRefusal, sleep(5000).then(() => assert.fail("the call of 3 was not refused within 5 s"))]);
      const until = performance.now() + 1500; // three more of its calls, and the pauses between them
      while (performance.now() < until) {
        await assert.rejects(small.semaphore(name, 3).tryAcquire(), NotAcquired);
        await sleep(20);
      }
    } finally {
      await h1.release();
      await h2.release();
    }
    const lk = await waiting;
    assert.deepEqual((await big.semaphore(name, 3).inspect()).held.map(countOf), [3]);
    assert.ok(calls.sent.length >= 3, `${calls.sent.length} calls`);
    assert.ok(calls.sent.every((r) => r.count === 3));
    const intents = new Set(calls.sent.map((r) => r.intent));
    assert.equal(intents.size, 1); // one intent, on every call
    assert.match([...intents][0] ?? "", /^[0-9a-f]{32}$/);
    assert.deepEqual(calls.withdrawn, []); // granted: nothing to withdraw
    assert.equal(await lk.release(), true);
    await (await small.semaphore(name, 3).tryAcquire({ count: 3 })).release();
  }),
);

test("a wait of several that ends or is aborted withdraws its intent", T, () =>
  withClients(3, async (holder, big, small) => {
    // Refused, a call with an intent keeps later calls out for 2 s; the
    // client withdraws it when its wait ends, so a single gets in at once.
    const name = key();
    const held = await holder.semaphore(name, 3).tryAcquire();
    const calls = record(big);
    const start = performance.now();
    await assert.rejects(big.semaphore(name, 3).acquire({ count: 3, waitMs: 1000 }), NotAcquired);
    const took = performance.now() - start;
    assert.ok(took > 900 && took < 5000, `${took} ms`);
    assert.ok(calls.sent.length >= 2);
    assert.deepEqual(calls.withdrawn, [{ name, intent: calls.sent[0].intent }]);
    await (await small.semaphore(name, 3).tryAcquire()).release(); // not kept out

    // Aborted in its second call, the wait withdraws its intent too. The
    // call it cut may end at the service after the withdrawal and keep the
    // line for the intent's 2 s (the service's doing): a single gets in
    // within that, not always at once.
    const ctl = new AbortController();
    const aborted = big.semaphore(name, 3).acquire({ count: 3, signal: ctl.signal });
    await sleep(700);
    ctl.abort(new Error("given up"));
    await assert.rejects(aborted, /given up/);
    assert.equal(calls.withdrawn.length, 2);
    assert.equal(calls.withdrawn[1].intent, calls.sent.at(-1)?.intent);
    assert.notEqual(calls.withdrawn[1].intent, calls.withdrawn[0].intent);
    const deadline = performance.now() + 3000;
    for (;;) {
      try {
        await (await small.semaphore(name, 3).tryAcquire()).release();
        break;
      } catch (e) {
        if (!(e instanceof NotAcquired) || performance.now() > deadline) throw e;
        await sleep(20);
      }
    }

    // A try of several sends no intent, and keeps nobody out.
    calls.sent.length = 0;
    await assert.rejects(big.semaphore(name, 3).tryAcquire({ count: 3 }), NotAcquired);
    assert.equal(calls.sent[0].intent, "");
    assert.equal(calls.withdrawn.length, 2);
    await (await small.semaphore(name, 3).tryAcquire()).release();
    await held.release();
  }),
);

test("a bad count is refused before any call", T, async () => {
  // Nothing listens on port 9: a call would be Unavailable.
  await using c = new Client("http://127.0.0.1:9", { timeoutMs: 1000 });
  const sem = c.semaphore(key(), 3);
  for (const count of [0, -1, 4, 1.5, Number.NaN, "2" as unknown as number]) {
    await assert.rejects(sem.acquire({ count }), InvalidArgument);
    await assert.rejects(sem.tryAcquire({ count }), InvalidArgument);
  }
});
