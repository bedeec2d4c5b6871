// client.lockAll(): all the keys or none, and no cycle of waits whatever
// order callers name their keys in, against a real service.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, InvalidArgument, NotAcquired } from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

let svc: Service;

before(async () => {
  svc = await startService();
});

after(async () => {
  await svc?.stop();
});

const T = { timeout: 60_000 };

test("overlapping sets in random orders: no key held twice, no wait ends", T, async () => {
  const base = "node-all/" + randomUUID();
  const keys = Array.from({ length: 6 }, (_, i) => `${base}/${i}`);
  const clients = [new Client(svc.url, { token: TOKENS.alpha }), new Client(svc.url, { token: TOKENS.alpha })];
  const holders = new Map(keys.map((k) => [k, 0]));
  let overlaps = 0;
  let sets = 0;
  const until = performance.now() + 2_000;
  try {
    await Promise.all(
      Array.from({ length: 8 }, async (_, n) => {
        const c = clients[n % 2];
        while (performance.now() < until) {
          const picked = [...keys].sort(() => Math.random() - 0.5).slice(0, 1 + Math.floor(Math.random() * 3));
          const set = await c.lockAll(picked, { waitMs: 30_000, leaseMs: 10_000 });
          for (const k of picked) {
            holders.set(k, (holders.get(k) ?? 0) + 1);
            if (holders.get(k) !== 1) overlaps++;
          }
          await sleep(Math.random() * 2);
          for (const k of picked) holders.set(k, (holders.get(k) ?? 0) - 1);
          await set.release();
          sets++;
        }
      }),
    );
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
  assert.equal(overlaps, 0, "a key was held by two sets at once");
  assert.ok(sets > 0);
});

test("all or none; in key order; bad sets refused", T, async () => {
  const base = "node-all/" + randomUUID();
  const [a, b, c] = [`${base}/a`, `${base}/b`, `${base}/c`];
  const client = new Client(svc.url, { token: TOKENS.alpha });
  const other = new Client(svc.url, { token: TOKENS.alpha });
  try {
    const held = await other.tryLock(b);
    await assert.rejects(client.lockAll([c, b, a], { waitMs: 0 }), NotAcquired);
    await (await client.tryLock(a)).release(); // a, tried before b, was given back
    await held.release();
    {
      await using set = await client.lockAll([c, a, b], { waitMs: 5_000 });
      assert.deepEqual(
        set.locks.map((l) => l.key),
        [a, b, c],
      );
      assert.ok(set.held && set.fence(b) > 0n);
      assert.throws(() => set.fence(base), RangeError);
      await assert.rejects(other.tryLock(c), NotAcquired);
    }
    await (await other.tryLock(c)).release();
    for (const bad of [[], [a, a], Array.from({ length: 65 }, (_, i) => `${base}/${i}`)]) {
      await assert.rejects(client.lockAll(bad), InvalidArgument);
    }
  } finally {
    await client.close();
    await other.close();
  }
});
