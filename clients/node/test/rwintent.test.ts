// A read-write lock's writer that waits by several calls keeps new readers
// out between its calls too (AcquireRWRequest.intent), until it gets in or
// gives up, against a real service of their own over its embedded store.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, NotAcquired } from "../src/index.js";
import { startService, TOKENS, type Service } from "./service.js";

let svc: Service;

before(async () => {
  svc = await startService();
});

after(async () => {
  await svc?.stop();
});

const key = () => "node-rw-intent/" + randomUUID();
const T = { timeout: 20_000 };

/** Clients of tenant alpha whose waits are made of calls of 300 ms, closed when the test ends. */
async function withClients(n: number, fn: (...c: Client[]) => Promise<void>): Promise<void> {
  const clients = Array.from({ length: n }, () => new Client(svc.url, { token: TOKENS.alpha, maxCallWaitMs: 300 }));
  try {
    await fn(...clients);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/**
 * Records a client's acquireRW and withdrawIntent calls: the requests sent.
 * After each refused acquireRW of a writer, in the pause before its next
 * call, it awaits onRefused.
 */
function record(c: Client, onRefused: () => Promise<void> = async () => {}) {
  const sent: { write?: boolean; intent?: string }[] = [];
  const withdrawn: { name?: string; intent?: string }[] = [];
  const unary = c.rpc.unary.bind(c.rpc);
  c.rpc.unary = (async (method: string, req: { write?: boolean; name?: string; intent?: string }, bounds: object) => {
    if (method === "acquireRW") sent.push({ ...req });
    else if (method === "withdrawIntent") withdrawn.push({ ...req });
    try {
      return await (unary as (m: string, r: object, b: object) => Promise<unknown>)(method, req, bounds);
    } catch (e) {
      if (e instanceof NotAcquired && method === "acquireRW" && req.write) await onRefused();
      throw e;
    }
  }) as typeof c.rpc.unary;
  return { sent, withdrawn };
}

/** Whether a new reader of name gets in now (it lets go at once). */
async function readerGetsIn(c: Client, name: string): Promise<boolean> {
  try {
    await (await c.rwlock(name).readLock({ waitMs: 0 })).release();
    return true;
  } catch (e) {
    if (e instanceof NotAcquired) return false;
    throw e;
  }
}

test("a waiting writer keeps new readers out between its calls too, then gets in", T, () =>
  withClients(3, async (holder, writer, reader) => {
    // The writer waits in calls of 300 ms while a reader holds. Between two
    // of its calls (where the service's own wait no longer keeps readers
    // out) a new reader tries, and is refused; the writer gets in once the
    // reader leaves, every call with the one intent.
    const name = key();
    const r1 = await holder.rwlock(name).readLock();
    const probes: boolean[] = [];
    const calls = record(writer, async () => {
      probes.push(await readerGetsIn(reader, name));
    });
    const writing = writer.rwlock(name).writeLock({ waitMs: 20_000 });
    writing.catch(() => {}); // awaited below
    try {
      const deadline = performance.now() + 5000; // three refused calls, at 300 ms each
      while (probes.length < 3 && performance.now() < deadline) await sleep(20);
    } finally {
      await r1.release();
    }
    const w = await writing;
    assert.ok(probes.length >= 3, `${probes.length} pauses between calls`);
    assert.deepEqual(new Set(probes), new Set([false]), "a new reader got in between the writer's calls");
    assert.ok(calls.sent.length >= 4, `${calls.sent.length} calls`);
    assert.ok(calls.sent.every((r) => r.write));
    const intents = new Set(calls.sent.map((r) => r.intent));
    assert.equal(intents.size, 1); // one intent, on every call
    assert.match([...intents][0] ?? "", /^[0-9a-f]{32}$/);
    assert.deepEqual(calls.withdrawn, []); // granted: nothing to withdraw
    assert.ok(w.fence > r1.fence);
    const seen = await holder.rwlock(name).inspect();
    assert.ok(seen.writer);
    assert.equal(seen.held.length, 1);
    assert.equal(await w.release(), true);
    assert.ok(await readerGetsIn(reader, name));
  }),
);

test("a writer's wait that ends or is aborted withdraws its intent", T, () =>
  withClients(3, async (holder, writer, reader) => {
    // Refused, a writer's call with an intent keeps new readers out for 2 s;
    // the client withdraws it when its wait ends, so a reader gets in at once.
    const name = key();
    const r1 = await holder.rwlock(name).readLock();
    const ctl = new AbortController();
    let abortAtRefusal = false;
    const calls = record(writer, async () => {
      if (abortAtRefusal) ctl.abort(new Error("given up"));
    });
    const start = performance.now();
    await assert.rejects(writer.rwlock(name).writeLock({ waitMs: 700 }), NotAcquired);
    const took = performance.now() - start;
    assert.ok(took > 600 && took < 5000, `${took} ms`);
    assert.ok(calls.sent.length >= 2, `${calls.sent.length} calls`);
    const intent = calls.sent[0].intent;
    assert.ok(calls.sent.every((r) => r.intent === intent));
    assert.deepEqual(calls.withdrawn, [{ name, intent }]);
    assert.ok(await readerGetsIn(reader, name), "a reader was kept out after the writer gave up");

    // Aborted between two calls of a wait with no end, it withdraws its
    // intent too.
    calls.sent.length = 0;
    abortAtRefusal = true;
    await assert.rejects(writer.rwlock(name).writeLock({ signal: ctl.signal }), /given up/);
    abortAtRefusal = false;
    assert.equal(calls.withdrawn.length, 2);
    assert.equal(calls.withdrawn[1].intent, calls.sent[0].intent);
    assert.notEqual(calls.withdrawn[1].intent, intent);
    assert.ok(await readerGetsIn(reader, name), "a reader was kept out after the writer's wait was aborted");

    // A writer's try sends no intent, and keeps nobody out; nor does a
    // reader's wait.
    calls.sent.length = 0;
    await assert.rejects(writer.rwlock(name).writeLock({ waitMs: 0 }), NotAcquired);
    await (await writer.rwlock(name).readLock({ waitMs: 500 })).release();
    assert.deepEqual(
      calls.sent.map((r) => r.intent),
      ["", ""],
    );
    assert.ok(await readerGetsIn(reader, name));
    assert.equal(calls.withdrawn.length, 2);
    await r1.release();

    // lockPath takes its node as a writer: a table's lock that gives up
    // while a row is held lets new rows in at once.
    const table = key();
    const row = await holder.lockPath([table, table + "/1"]);
    calls.sent.length = 0;
    await assert.rejects(writer.lockPath([table], { waitMs: 500 }), NotAcquired);
    assert.ok(calls.sent.length >= 2, `${calls.sent.length} calls`);
    assert.deepEqual(calls.withdrawn.at(-1), { name: table, intent: calls.sent[0].intent });
    await (await reader.lockPath([table, table + "/2"], { waitMs: 0 })).release();
    await row.release();
  }),
);
