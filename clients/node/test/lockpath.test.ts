// client.lockPath() and rLockPath() against a real service: a table's lock
// excludes its rows' and theirs exclude it, rows run side by side, a waiting
// table lock keeps new rows out, and a path that fails leaves nothing taken.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, InvalidArgument, MAX_PATH_DEPTH, NotAcquired } from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

let svc: Service;

before(async () => {
  svc = await startService();
});

after(async () => {
  await svc?.stop();
});

const table = () => "node-path/" + randomUUID();
const T = { timeout: 20_000 };

/** Clients of tenant alpha, closed when the test ends. */
async function withClients(n: number, fn: (...c: Client[]) => Promise<void>): Promise<void> {
  const clients = Array.from({ length: n }, () => new Client(svc.url, { token: TOKENS.alpha }));
  try {
    await fn(...clients);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/** How many holds name's read-write lock has, and whether a writer's. */
async function holds(c: Client, name: string): Promise<[number, boolean]> {
  const seen = await c.rwlock(name).inspect();
  return [seen.held.length, seen.writer];
}

test("a table lock excludes its rows' and theirs exclude it; rows run side by side", T, () =>
  withClients(2, async (client, other) => {
    const t = table();
    const [r1, r2] = [`${t}/1`, `${t}/2`];
    const row = await client.lockPath([t, r1]);
    {
      await using _ = row;
      assert.deepEqual(
        row.locks.map((l) => l.key),
        [t, r1],
      );
      assert.ok(row.held && row.fence(t) > 0n && row.fence(r1) > 0n);
      assert.throws(() => row.fence(r2), RangeError);
      await assert.rejects(other.lockPath([t], { waitMs: 0 }), NotAcquired); // the table
      await assert.rejects(other.lockPath([t, r1], { waitMs: 0 }), NotAcquired); // the same row
      await assert.rejects(other.rLockPath([t, r1], { waitMs: 0 }), NotAcquired); // a read of the same row
      {
        await using beside = await other.lockPath([t, r2], { waitMs: 0 }); // another row
        await using read = await other.rLockPath([t], { waitMs: 0 }); // a read of the table
        assert.ok(beside.held && read.held);
        assert.deepEqual(await holds(client, t), [3, false]);
        assert.deepEqual(await holds(client, r1), [1, true]);
      }
      // The refused paths took the table as a reader first: given back.
      assert.deepEqual(await holds(client, t), [1, false]);
    }
    assert.ok(!row.held);
    assert.deepEqual(await holds(client, t), [0, false]);
    assert.deepEqual(await holds(client, r1), [0, false]);

    {
      await using whole = await client.lockPath([t], { waitMs: 0 });
      assert.deepEqual(
        whole.locks.map((l) => l.key),
        [t],
      );
      await assert.rejects(other.lockPath([t, r1], { waitMs: 0 }), NotAcquired);
      await assert.rejects(other.rLockPath([t, r1], { waitMs: 0 }), NotAcquired);
    }
    {
      await using a = await other.rLockPath([t, r1], { waitMs: 0 }); // readers of a row share it
      await using b = await client.rLockPath([t, r1], { waitMs: 0 });
      assert.ok(a.held && b.held);
      assert.deepEqual(await holds(client, r1), [2, false]);
    }
  }),
);

test("a waiting table lock keeps new rows out; the whole path's wait is bounded", T, () =>
  withClients(2, async (client, other) => {
    const t = table();
    const [r1, r2] = [`${t}/1`, `${t}/2`];
    const row = await client.lockPath([t, r1]);
    const waiting = other.lockPath([t], { waitMs: 10_000 });
    waiting.catch(() => {}); // awaited below
    try {
      const deadline = performance.now() + 5000;
      while ((await client.rwlock(t).inspect()).writersWaiting === 0) {
        assert.ok(performance.now() < deadline, "the table lock did not wait within 5 s");
        await sleep(20);
      }
      await assert.rejects(client.lockPath([t, r2], { waitMs: 0 }), NotAcquired); // a new row stays out
      const start = performance.now();
      await assert.rejects(client.lockPath([t, r2], { waitMs: 500 }), NotAcquired);
      const took = performance.now() - start;
      assert.ok(took > 400 && took < 3000, `${took} ms`);
    } finally {
      await row.release();
    }
    await using whole = await waiting;
    assert.ok(whole.held && whole.fence(t) > row.fence(t));
  }),
);

test("a path that fails or is aborted releases what it took; the deepest path", T, () =>
  withClients(2, async (client, other) => {
    // The row is held: a path of it takes the table as a reader, waits for
    // the row until its wait ends, and gives the table back.
    const t = table();
    const r1 = `${t}/1`;
    const row = await other.lockPath([t, r1]);
    const start = performance.now();
    await assert.rejects(client.lockPath([t, r1], { waitMs: 600 }), NotAcquired);
    const took = performance.now() - start;
    assert.ok(took > 500 && took < 3000, `${took} ms`);
    assert.deepEqual(await holds(client, t), [1, false]);

    const ctl = new AbortController();
    const aborted = client.lockPath([t, r1], { signal: ctl.signal });
    await sleep(300);
    ctl.abort(new Error("given up"));
    await assert.rejects(aborted, /given up/);
    assert.deepEqual(await holds(client, t), [1, false]);
    await row.release();

    const deep = [t, ...Array.from({ length: MAX_PATH_DEPTH - 1 }, (_, i) => `${t}/${"x".repeat(i + 1)}`)];
    {
      await using s = await client.lockPath(deep, { waitMs: 5000 });
      assert.equal(s.locks.length, MAX_PATH_DEPTH);
      assert.ok(s.held);
    }
    await (await client.lockPath([t], { waitMs: 0 })).release(); // nothing stays held
  }),
);

test("bad paths are refused before any call", T, async () => {
  // Nothing listens on port 9: a call would be Unavailable.
  await using c = new Client("http://127.0.0.1:9", { timeoutMs: 1000 });
  const bad: unknown[] = [
    [],
    Array.from({ length: MAX_PATH_DEPTH + 1 }, (_, i) => `t/${i}`),
    ["t", "t/1", "t"],
    ["t", ""],
    ["t", "t/\u0000"],
    ["t", "t/\u0085"],
    ["t", "t/\ud800"],
    ["x".repeat(513)],
    ["é".repeat(257)],
    ["t", 42],
    "t/1",
  ];
  for (const path of bad) {
    await assert.rejects(c.lockPath(path as string[]), InvalidArgument);
    await assert.rejects(c.rLockPath(path as string[]), InvalidArgument);
  }
});
