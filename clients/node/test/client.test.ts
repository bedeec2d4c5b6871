// The client against a real lock service.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import * as net from "node:net";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import {
  Client,
  DistlockError,
  InvalidArgument,
  LockLost,
  NotAcquired,
  NotHeld,
  PermissionDenied,
  Unauthenticated,
  type Leader,
  type Lock,
} from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

let svc: Service;
// Observe streams last 2 s, so that a test sees the observer open its
// stream again.
const STREAM_LIFETIME_MS = 2000;

before(async () => {
  svc = await startService("--max-stream-lifetime", `${STREAM_LIFETIME_MS}ms`);
});

after(async () => {
  await svc?.stop();
});

const key = () => "node/" + randomUUID();
const T = { timeout: 20_000 };

/** A client of tenant alpha (or of token), closed when the test ends. */
async function withClients(n: number, fn: (...c: Client[]) => Promise<void>, token: string = TOKENS.alpha): Promise<void> {
  const clients = Array.from({ length: n }, () => new Client(svc.url, { token }));
  try {
    await fn(...clients);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/** The next value of it within ms, or a failure. */
async function next<T>(it: AsyncIterator<T>, ms = 5000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`nothing came within ${ms} ms`)), ms);
  });
  try {
    const r = await Promise.race([it.next(), late]);
    assert.ok(!r.done, "the iteration ended");
    return r.value;
  } finally {
    clearTimeout(timer);
  }
}

test("a lock excludes others and renews itself past two leases", T, () =>
  withClients(2, async (client, other) => {
    const k = key();
    let lk: Lock;
    {
      await using held = await client.lock(k, { leaseMs: 1500, owner: "node-test" });
      lk = held;
      assert.ok(held.fence > 0n && held.token);
      await sleep(3500); // past two leases: only the renewals keep it
      assert.ok(held.held && !held.signal.aborted);
      await assert.rejects(other.tryLock(k), NotAcquired);
      const seen = await other.inspect(k);
      assert.equal(seen.owner, "node-test");
      assert.equal(seen.fence, held.fence);
    } // await using released it
    assert.ok(!lk.held);
    const again = await other.tryLock(k);
    assert.ok(again.fence > lk.fence);
    assert.equal(await again.release(), true);
    assert.equal(await again.release(), false); // released once
  }),
);

test("a lock waits for a release, and a wait ends with NotAcquired", T, () =>
  withClients(2, async (client, other) => {
    const k = key();
    const first = await client.lock(k, { leaseMs: 30_000 });
    const releasing = sleep(500).then(() => first.release());
    const start = performance.now();
    const second = await other.lock(k, { leaseMs: 30_000, waitMs: 10_000 });
    const took = performance.now() - start;
    assert.ok(took > 400 && took < 5000, `waited ${took} ms`);
    assert.equal(await releasing, true);
    assert.ok(second.fence > first.fence);
    const waitStart = performance.now();
    await assert.rejects(client.lock(k, { waitMs: 300 }), NotAcquired);
    assert.ok(performance.now() - waitStart >= 250);
    await assert.rejects(client.tryLock(k), (e: unknown) => e instanceof NotAcquired && e.code === "aborted");
    await second.release();
  }),
);

test("a wait of several calls keeps its place in line", T, async () => {
  // B waits in calls of 500 ms; C queues after it in one long call. The
  // holder lets go after B's first call ended: B, queued first, is next.
  const b = new Client(svc.url, { token: TOKENS.alpha, maxCallWaitMs: 500 });
  try {
    await withClients(2, async (holder, c) => {
      const k = key();
      const first = await holder.lock(k, { leaseMs: 30_000 });
      const order: string[] = [];
      const wait = async (name: string, cl: Client) => {
        const lk = await cl.lock(k, { leaseMs: 30_000, waitMs: 15_000 });
        order.push(name);
        await sleep(100);
        await lk.release();
      };
      const waits = [wait("B", b)];
      await sleep(250);
      waits.push(wait("C", c));
      await sleep(1100); // B's first two calls have ended
      await first.release();
      await Promise.all(waits);
      assert.deepEqual(order, ["B", "C"]);
    });
  } finally {
    await b.close();
  }
});

test("a retry with the same request id finds the same grant", T, () =>
  withClients(1, async (client) => {
    const k = key();
    const body = { key: k, requestId: randomUUID(), lease: { seconds: 30n, nanos: 0 } };
    const first = await client.call("acquire", body);
    const again = await client.call("acquire", body); // a retry whose first answer was lost
    assert.equal(again.token, first.token);
    assert.equal(again.fence, first.fence);
    await client.call("release", { key: k, token: first.token });
  }),
);

/**
 * A loopback proxy to the service that passes the first call on but drops
 * its answer and cuts the connection, as a network that fails after the
 * service acted; later connections pass both ways.
 */
async function dropFirstAnswer(): Promise<{ url: string; connections: () => number; dropped: () => string; close: () => Promise<void> }> {
  const target = new URL(svc.url);
  let count = 0;
  let dropped = "";
  const sockets = new Set<net.Socket>();
  const server = net.createServer((down) => {
    const n = ++count;
    const up = net.connect(Number(target.port), target.hostname);
    for (const s of [down, up]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
    down.pipe(up);
    if (n === 1) {
      up.once("data", (b: Buffer) => {
        dropped = b.toString("latin1").split("\r\n")[0];
        down.destroy();
        up.destroy();
      });
    } else {
      up.pipe(down);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => count,
    dropped: () => dropped,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

test("a call whose answer was lost is sent again and takes no second lock or permit", T, () =>
  withClients(1, async (other) => {
    const k = key();
    const proxy = await dropFirstAnswer();
    const client = new Client(proxy.url, { token: TOKENS.alpha });
    try {
      // waitMs 0: a second grant could not be had while the first holds k.
      const lk = await client.lock(k, { waitMs: 0 });
      assert.match(proxy.dropped(), /^HTTP\/1\.1 200/, "the first call was granted, its answer dropped");
      assert.equal(proxy.connections(), 2);
      const seen = await other.inspect(k);
      assert.ok(seen.held);
      assert.equal(seen.fence, lk.fence);
      assert.equal(await lk.release(), true);
      assert.equal((await other.inspect(k)).held, false);
    } finally {
      await client.close();
      await proxy.close();
    }

    const name = key();
    const proxy2 = await dropFirstAnswer();
    const permits = new Client(proxy2.url, { token: TOKENS.alpha });
    try {
      const p = await permits.semaphore(name, 2).acquire({ waitMs: 0 });
      assert.match(proxy2.dropped(), /^HTTP\/1\.1 200/);
      const { held } = await other.semaphore(name, 2).inspect();
      assert.deepEqual(
        held.map((h) => h.fence),
        [p.fence],
        "one permit held, the retry's",
      );
      await p.release();
    } finally {
      await permits.close();
      await proxy2.close();
    }
  }),
);

test("a forced release is told at the next renewal, well before the lease ends", T, () =>
  withClients(1, async (client) => {
    const k = key();
    const leaseMs = 3000;
    let told: LockLost | undefined;
    const lk = await client.lock(k, { leaseMs, onLost: (_, reason) => (told = reason) });
    const granted = performance.now();
    const aborted = new Promise<void>((resolve) => lk.signal.addEventListener("abort", () => resolve(), { once: true }));
    const admin = new Client(svc.url, { token: TOKENS.admin });
    try {
      const removed = await admin.forceRelease(k, "the node client's test");
      assert.equal(removed.fence, lk.fence);
    } finally {
      await admin.close();
    }
    await Promise.race([aborted, sleep(5000).then(() => assert.fail("the holder was not told within 5 s"))]);
    const after = performance.now() - granted;
    assert.ok(after < leaseMs * 0.7, `told ${after} ms after the grant, lease ${leaseMs} ms`);
    assert.ok(lk.signal.reason instanceof LockLost);
    assert.equal(lk.signal.reason.kind, "refused");
    assert.match(lk.signal.reason.message, /^taken or released by another/);
    assert.equal(told, lk.signal.reason);
    assert.ok(!lk.held);
    assert.equal(await lk.release(), false);
  }),
);

test("bad input is refused naming the field, and changes nothing", T, () =>
  withClients(1, async (client) => {
    const locks = async () => (await client.call("list", { prefix: "" })).locks.length;
    const before = await locks();
    await assert.rejects(client.tryLock(""), (e: unknown) => e instanceof InvalidArgument && e.code === "invalid_argument" && /\bkey\b/.test(e.message));
    await assert.rejects(client.tryLock("bad\x00key"), InvalidArgument);
    await assert.rejects(client.lock(key(), { leaseMs: 0.1 }), (e: unknown) => e instanceof InvalidArgument && /\blease\b/.test(e.message));
    await assert.rejects(client.semaphore(key(), 0).tryAcquire(), InvalidArgument);
    assert.equal(await locks(), before);
    await assert.rejects(client.lock(key(), { waitMs: -1 }), RangeError);
    assert.throws(() => new Client("ftp://127.0.0.1:1"), TypeError);
    assert.throws(() => new Client("not a url"), TypeError);
    await withClients(1, async (stranger) => {
      await assert.rejects(stranger.tryLock(key()), Unauthenticated);
    }, "no-such-token-000000000");
    await withClients(1, async (viewer) => {
      await assert.rejects(viewer.tryLock(key()), PermissionDenied);
      await assert.rejects(viewer.forceRelease(key(), "not an admin"), PermissionDenied);
    }, TOKENS.viewer);
    await assert.rejects(client.forceRelease(key(), "not an admin"), PermissionDenied);
  }),
);

test("tenants are apart: beta cannot see alpha's key", T, () =>
  withClients(1, async (client) => {
    const k = key();
    await using lk = await client.lock(k);
    await withClients(1, async (beta) => {
      assert.equal((await beta.inspect(k)).held, false);
      const own = await beta.tryLock(k); // beta's own key of the same name
      assert.equal(await own.release(), true);
    }, TOKENS.beta);
    assert.ok(lk.held);
    assert.equal((await client.inspect(k)).fence, lk.fence);
  }),
);

test("a session keeps its locks past its TTL, and closing it releases them", T, () =>
  withClients(2, async (client, other) => {
    const [a, b] = [key(), key()];
    let la: Lock, lb: Lock;
    {
      await using s = await client.session({ ttlMs: 2000 });
      la = await client.lock(a, { session: s });
      lb = await client.lock(b, { session: s });
      assert.equal(la.session, s);
      await sleep(3000); // past the TTL: only the session's KeepAlives keep them
      assert.ok((await other.inspect(a)).held && (await other.inspect(b)).held);
      assert.ok(la.held && lb.held && s.held);
      await assert.rejects(other.tryLock(a), NotAcquired);
    }
    assert.ok(!la.held && !lb.held);
    assert.equal((await other.inspect(a)).held, false);
    assert.equal((await other.inspect(b)).held, false);
  }),
);

test("a session's loss is told to its locks", T, () =>
  withClients(1, async (client) => {
    const s = await client.session({ ttlMs: 3000 });
    const lk = await client.lock(key(), { session: s });
    await client.call("closeSession", { sessionId: s.id }); // ended behind its back
    await Promise.race([
      new Promise((resolve) => lk.signal.addEventListener("abort", resolve, { once: true })),
      sleep(5000).then(() => assert.fail("the session's lock was not told within 5 s")),
    ]);
    assert.ok(s.signal.aborted && !s.held);
    assert.equal(lk.signal.reason.kind, "refused");
    assert.match(lk.signal.reason.message, /^the session ended/);
    await s.close(); // ended already: no error
  }),
);

test("a semaphore grants at most its permits", T, () =>
  withClients(2, async (client, other) => {
    const name = key();
    const sem = client.semaphore(name, 2);
    const p1 = await sem.acquire({ leaseMs: 30_000 });
    const p2 = await sem.acquire({ leaseMs: 30_000 });
    assert.ok(p2.fence > p1.fence);
    await assert.rejects(other.semaphore(name, 2).tryAcquire(), NotAcquired);
    const releasing = sleep(300).then(() => p1.release());
    const p3 = await other.semaphore(name, 2).acquire({ waitMs: 10_000 });
    await releasing;
    const seen = await sem.inspect();
    assert.equal(seen.permits, 2);
    assert.equal(seen.held.length, 2);
    await assert.rejects(other.semaphore(name, 3).tryAcquire(), InvalidArgument);
    await sem.setPermits(3);
    const p4 = await other.semaphore(name, 3).tryAcquire();
    assert.equal((await sem.inspect()).held.length, 3);
    for (const p of [p2, p3, p4]) assert.equal(await p.release(), true);
  }),
);

test("a read-write lock shares readers, and a waiting writer keeps new readers out", T, () =>
  withClients(2, async (client, other) => {
    const name = key();
    const rw = client.rwlock(name);
    const r1 = await rw.readLock();
    const r2 = await rw.readLock();
    await assert.rejects(other.rwlock(name).writeLock({ waitMs: 0 }), NotAcquired);
    const writing = other.rwlock(name).writeLock({ waitMs: 10_000 });
    const deadline = performance.now() + 5000;
    while ((await rw.inspect()).writersWaiting === 0) {
      assert.ok(performance.now() < deadline, "the waiting writer kept no reader out");
      await sleep(20);
    }
    await assert.rejects(rw.readLock({ waitMs: 0 }), NotAcquired); // a writer waits: new readers stay out
    await r1.release();
    await r2.release();
    const w = await writing;
    assert.ok(w.fence > r1.fence && w.fence > r2.fence);
    const seen = await rw.inspect();
    assert.ok(seen.writer);
    assert.equal(seen.held.length, 1);
    await w.release();
  }),
);

test("a writer downgraded to a reader lets readers in, keeps writers out, and carries on", T, () =>
  withClients(2, async (client, other) => {
    const name = key();
    const rw = client.rwlock(name);
    const theirs = other.rwlock(name);
    let w = await rw.writeLock({ leaseMs: 1500 });
    await assert.rejects(theirs.readLock({ waitMs: 0 }), NotAcquired);
    const reading = theirs.readLock({ waitMs: 10_000 });
    await rw.downgrade(w);
    const r = await reading; // the waiting reader joined
    await assert.rejects(theirs.writeLock({ waitMs: 0 }), NotAcquired);
    let seen = await rw.inspect();
    assert.ok(!seen.writer);
    assert.deepEqual(seen.held.map((h) => h.fence).sort(), [w.fence, r.fence].sort());
    await rw.downgrade(w); // a reader's hold stays as it is
    await sleep(2000); // past its lease: only the renewals (RenewRW) keep it
    assert.ok(w.held && !w.signal.aborted);
    assert.equal((await rw.inspect()).held.length, 2);
    assert.equal(await w.release(), true);
    await r.release();
    await assert.rejects(rw.downgrade(w), NotHeld); // released: refused before any call
    await (await theirs.writeLock({ waitMs: 0 })).release(); // nothing stays held

    // A hold the service no longer knows: NotHeld, and its loss is told.
    w = await rw.writeLock({ leaseMs: 30_000 });
    const lost = new Promise<LockLost>((resolve) => w.signal.addEventListener("abort", () => resolve(w.signal.reason), { once: true }));
    await client.call("releaseRW", { name, token: w.token });
    await assert.rejects(rw.downgrade(w), NotHeld);
    const reason = await Promise.race([lost, sleep(5000).then(() => assert.fail("the loss was not told within 5 s"))]);
    assert.equal(reason.kind, "refused");
    for (const wrong of [
      await other.rwlock(key()).writeLock({ waitMs: 0 }),
      await other.tryLock(name),
      await other.semaphore(name, 1).tryAcquire(),
    ]) {
      await assert.rejects(rw.downgrade(wrong), InvalidArgument); // no hold of this read-write lock
      assert.equal(await wrong.release(), true);
    }
    seen = await rw.inspect();
    assert.equal(seen.held.length, 0);
  }),
);

test("an election has one leader; observers see each change, across a reopened stream", T, () =>
  withClients(2, async (client, other) => {
    const name = key();
    const el = client.election(name);
    const a = await el.campaign("10.0.0.1", { leaseMs: 30_000 });
    assert.equal(a.key, "election/" + name);
    const stop = new AbortController();
    const opened = performance.now();
    const stream = other.election(name).observe({ signal: stop.signal });
    const first = await next(stream);
    assert.equal(first.value, "10.0.0.1");
    assert.equal(first.fence, a.fence);
    assert.ok(first.held);

    const campaigning = other.election(name).campaign("10.0.0.2", { waitMs: 10_000 });
    await sleep(300);
    assert.equal((await el.leader()).value, "10.0.0.1");
    assert.equal(await a.release(), true); // resigns
    const b = await campaigning;
    assert.ok(b.fence > a.fence);
    let seen: Leader;
    for (let i = 0; ; i++) {
      assert.ok(i < 5, "the new leader was not observed");
      seen = await next(stream); // the first term's end may come first
      if (seen.held) break;
      assert.equal(seen.fence, a.fence);
    }
    assert.equal(seen.value, "10.0.0.2");
    assert.equal(seen.fence, b.fence);
    assert.equal((await el.leader()).value, "10.0.0.2");

    // Past the stream's lifetime the service ends it; the observer opens it
    // again, without repeating what it has seen, and goes on. (The next
    // leader campaigns without a wait: the service's Watch, under Observe,
    // may report a term granted to a waiting campaign as ended at once, and
    // then miss its real end.)
    assert.equal(await b.release(), true);
    await sleep(Math.max(0, opened + STREAM_LIFETIME_MS + 500 - performance.now()));
    const c3 = await el.campaign("10.0.0.3", { waitMs: 0 });
    for (let i = 0; ; i++) {
      assert.ok(i < 5, "the third leader was not observed");
      seen = await next(stream);
      if (seen.held) break;
      assert.equal(seen.fence, b.fence); // the second term's end
    }
    assert.equal(seen.value, "10.0.0.3");
    assert.equal(seen.fence, c3.fence);
    assert.ok(performance.now() - opened > STREAM_LIFETIME_MS);
    await c3.release();

    stop.abort();
    const done = await Promise.race([stream.next(), sleep(5000).then(() => assert.fail("observe did not end with its signal"))]);
    assert.ok(done.done);
  }),
);

test("close releases what the client holds, ends its waits and observers", T, () =>
  withClients(1, async (other) => {
    const c = new Client(svc.url, { token: TOKENS.alpha });
    const [k, name, busy, elName] = [key(), key(), key(), key()];
    const lk = await c.lock(k);
    const permit = await c.semaphore(name, 1).acquire();
    const writer = await c.rwlock(name).writeLock();
    const term = await c.election(elName).campaign("me");
    const s = await c.session({ ttlMs: 10_000 });
    const sk = await c.lock(key(), { session: s });
    const blocker = await other.lock(busy);
    // Waits until granted, or the client closes.
    const waiting = c.lock(busy).then(
      () => assert.fail("granted"),
      (e: unknown) => e,
    );
    const observer = c.election(elName).observe();
    assert.equal((await next(observer)).value, "me");
    await sleep(100);
    const start = performance.now();
    await c.close();
    assert.ok(performance.now() - start < 5000);
    const stopped = await waiting;
    assert.ok(stopped instanceof DistlockError && stopped.code === "canceled", `${stopped}`);
    assert.deepEqual(await observer.next(), { done: true, value: undefined });
    for (const h of [lk, permit, writer, term, sk]) assert.ok(!h.held && !h.signal.aborted);
    assert.ok(!s.held);
    assert.equal(await (await other.tryLock(k)).release(), true);
    assert.equal(await (await other.semaphore(name, 1).tryAcquire()).release(), true);
    assert.equal(await (await other.rwlock(name).writeLock({ waitMs: 0 })).release(), true);
    assert.equal((await other.election(elName).leader()).held, false);
    assert.equal((await other.inspect(sk.key)).held, false);
    await assert.rejects(c.lock(key()), (e: unknown) => e instanceof DistlockError && e.code === "canceled");
    await c.close(); // twice is harmless
    await blocker.release();
  }),
);
