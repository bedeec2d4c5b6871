// Following the service's loss stream ({ watchLoss: true }): a holder
// learns of a forced release within milliseconds, not at its next renewal
// (a third of the lease: 10 s for these 30 s leases).

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, LockLost, type Lock } from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

// How soon a holder must be told; measured on a 2-core machine: a few ms.
const TOLD_WITHIN_MS = 500;

let svc: Service;
// One Watch stream per tenant, ended after half a second. The limits are the
// service's, whatever its store: the in-memory one starts in a fifth of the
// time.
let capped: Service;

before(async () => {
  [svc, capped] = await Promise.all([
    startService(),
    startService("--backend", "mem://", "--max-streams-per-tenant", "1", "--max-stream-lifetime", "500ms"),
  ]);
});

after(async () => {
  await Promise.all([svc?.stop(), capped?.stop()]);
});

const key = () => "node-watch/" + randomUUID();
const T = { timeout: 20_000 };

/** Clients of the service at url, closed when fn ends: a watching one of tenant alpha, and an admin. */
async function withClients(url: string, fn: (watching: Client, admin: Client) => Promise<void>): Promise<void> {
  const watching = new Client(url, { token: TOKENS.alpha, watchLoss: true });
  const admin = new Client(url, { token: TOKENS.admin });
  try {
    await fn(watching, admin);
  } finally {
    await Promise.all([watching.close(), admin.close()]);
  }
}

/** Resolves once cond holds, polled every 10 ms, or fails after ms. */
async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!cond()) {
    assert.ok(performance.now() < deadline, `${what}: not within ${ms} ms`);
    await sleep(10);
  }
}

/** Opens c's loss stream (at its first lock) and waits until it is live. */
async function warm(c: Client): Promise<void> {
  await (await c.tryLock(key())).release();
  await until("the loss stream is live", () => c.lossWatch!.live);
}

/** Force-releases lk's key; resolves with how long its holder took to learn it. */
async function told(admin: Client, lk: Lock, within = 5000): Promise<number> {
  const start = performance.now();
  const lost = new Promise<number>((resolve) => lk.signal.addEventListener("abort", () => resolve(performance.now() - start), { once: true }));
  await admin.forceRelease(lk.key, "the loss watch's test");
  const late = new AbortController();
  try {
    return await Promise.race([
      lost,
      sleep(within, undefined, { signal: late.signal }).then(() => assert.fail(`the holder of ${lk.key} was not told within ${within} ms`)),
    ]);
  } finally {
    late.abort(); // the timer must not keep the test's process running
  }
}

test("a forced release is told at once", T, (t) =>
  withClients(svc.url, async (watching, admin) => {
    await warm(watching);
    const took: number[] = [];
    let calls = 0;
    for (let i = 0; i < 10; i++) {
      const lk = await watching.lock(key(), { leaseMs: 30_000, onLost: () => calls++ });
      took.push(await told(admin, lk));
      const reason = lk.signal.reason as LockLost;
      assert.ok(reason instanceof LockLost);
      assert.equal(reason.kind, "refused");
      assert.match(reason.message, /^force-released/);
      assert.ok(!lk.held);
      if (i === 0) assert.equal(await lk.release(), false);
    }
    assert.equal(calls, 10);
    took.sort((a, b) => a - b);
    t.diagnostic(`forced release told after ${took[5].toFixed(1)} ms (median), ${took[9].toFixed(1)} ms (max) of 10`);
    assert.ok(took[9] < TOLD_WITHIN_MS, `told after ${took.join(", ")} ms`);
  }),
);

test("a forced release before the stream is live is told by a renewal", T, () =>
  // The stream opens at the first lock and misses what comes before it is
  // live: the locks granted before renew then, and the refusal tells.
  withClients(svc.url, async (watching, admin) => {
    const lk = await watching.lock(key(), { leaseMs: 30_000 });
    const ms = await told(admin, lk);
    assert.ok(ms < 2 * TOLD_WITHIN_MS, `told after ${ms} ms`);
    assert.equal(watching.lossWatch!.opened, 1);
  }),
);

test("session locks and election terms are told", T, () =>
  withClients(svc.url, async (watching, admin) => {
    await warm(watching);
    await using s = await watching.session({ ttlMs: 15_000 });
    const sl = await watching.lock(key(), { session: s });
    assert.ok((await told(admin, sl)) < TOLD_WITHIN_MS);
    assert.ok(s.held, "the session lives on");
    const term = await watching.election(key()).campaign("10.0.0.1", { leaseMs: 30_000 });
    assert.ok((await told(admin, term)) < TOLD_WITHIN_MS);
  }),
);

test("a release, the next holder and an earlier hold's forced release are no loss", T, () =>
  withClients(svc.url, async (watching, admin) => {
    await warm(watching);
    const k = key();
    const a = await watching.lock(k, { leaseMs: 30_000 });
    const waiting = watching.lock(k, { leaseMs: 30_000, waitMs: 10_000 });
    await sleep(100); // b waits
    assert.ok(await a.release());
    const b = await waiting;
    assert.ok(b.fence > a.fence);
    // An earlier hold of the key, someone else's, force-released while this
    // client waits for the key: that release is not the loss of the next.
    const other = new Client(svc.url, { token: TOKENS.alpha });
    try {
      const earlier = await other.call("acquire", { key: k + "/2" }); // the service's default lease
      const waitingC = watching.lock(k + "/2", { leaseMs: 30_000, waitMs: 10_000 });
      await sleep(100); // c waits
      await admin.forceRelease(k + "/2", "an earlier holder");
      const c = await waitingC;
      assert.ok(c.fence > earlier.fence);
      await sleep(100); // any event about those keys has come
      assert.ok(!a.signal.aborted && b.held && c.held);
      assert.ok((await b.release()) && (await c.release()), "still theirs");
      const d = await watching.lock(key(), { leaseMs: 30_000 });
      assert.ok((await told(admin, d)) < TOLD_WITHIN_MS, "the stream still tells");
    } finally {
      await other.close();
    }
  }),
);

test("a release by another holder of the token is told at once", T, () =>
  // A lock stops being followed before its own release: a release of one
  // still followed makes it renew at once, and the refusal tells, not the
  // renewal 10 s later.
  withClients(svc.url, async (watching) => {
    await warm(watching);
    const other = new Client(svc.url, { token: TOKENS.alpha });
    try {
      const lk = await watching.lock(key(), { leaseMs: 30_000 });
      const start = performance.now();
      const lost = new Promise<number>((resolve) => lk.signal.addEventListener("abort", () => resolve(performance.now() - start), { once: true }));
      await other.call("release", { key: lk.key, token: lk.token });
      const ms = await Promise.race([lost, sleep(5000, -1, { ref: false })]);
      assert.ok(ms >= 0, "the holder was not told within 5 s");
      assert.ok(ms < 2 * TOLD_WITHIN_MS, `told after ${ms} ms`);
      assert.equal(await lk.release(), false);
    } finally {
      await other.close();
    }
  }),
);

/**
 * Opens a Watch stream of c's tenant, which takes one of its streams;
 * resolves once it is live, with what ends it. Rejects if it is refused.
 */
async function occupy(c: Client): Promise<AbortController> {
  const ctl = new AbortController();
  let live!: () => void;
  const isLive = new Promise<void>((resolve) => (live = resolve));
  const onHeader = (h: Headers) => h.has("Distlock-Watch-Live") && live();
  const ended = c.rpc.stream("watch", { prefix: "elsewhere/" }, ctl.signal, { onHeader })[Symbol.asyncIterator]().next();
  try {
    await Promise.race([isLive, ended.then(() => assert.fail("the stream ended"))]);
  } catch (e) {
    ctl.abort();
    throw e;
  }
  return ctl;
}

test("renewals tell while no stream is live; the stream opens again after its lifetime", T, () =>
  withClients(capped.url, async (watching, admin) => {
    const viewer = new Client(capped.url, { token: TOKENS.viewer });
    try {
      const occupier = await occupy(viewer); // the tenant's only stream, for half a second
      let lk = await watching.lock(key(), { leaseMs: 1500 });
      await sleep(100);
      assert.ok(!watching.lossWatch!.live, "a stream over the tenant's cap went live");
      const ms = await told(admin, lk);
      assert.match((lk.signal.reason as LockLost).message, /^taken/);
      assert.ok(ms < 1500, `told after ${ms} ms`);
      occupier.abort();

      lk = await watching.lock(key(), { leaseMs: 30_000 });
      // It opens, ends at its lifetime and opens again.
      await until("the stream opened twice", () => watching.lossWatch!.opened >= 2 && watching.lossWatch!.live, 10_000);
      assert.ok(lk.held);
      assert.ok((await told(admin, lk)) < TOLD_WITHIN_MS);

      await watching.close();
      // close() ended the client's stream: the tenant's slot is free.
      const deadline = performance.now() + 5000;
      for (;;) {
        try {
          (await occupy(viewer)).abort();
          break;
        } catch (e) {
          assert.ok(performance.now() < deadline, `the client's stream outlived its close(): ${e}`);
          await sleep(50);
        }
      }
    } finally {
      await viewer.close();
    }
  }),
);

test("close() ends the stream; none opens before a lock or without watchLoss", T, async () => {
  // Node 18's types lack it; Node has it since 17.3.
  const proc = process as unknown as { getActiveResourcesInfo(): string[] };
  const sockets = () => proc.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;
  const before = sockets();
  const c = new Client(svc.url, { token: TOKENS.alpha, watchLoss: true });
  assert.equal(c.lossWatch!.opened, 0);
  const lk = await c.lock(key(), { leaseMs: 30_000 });
  await until("the loss stream is live", () => c.lossWatch!.live);
  assert.ok(lk.held);
  await c.close();
  assert.ok(!c.lossWatch!.live && !lk.held);
  await until("the client's sockets are closed", () => sockets() <= before);
  const off = new Client(svc.url, { token: TOKENS.alpha });
  assert.equal(off.lossWatch, undefined);
  await off.close();
});
