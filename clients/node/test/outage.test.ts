// The client when the service dies, is down, or never answers.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import * as net from "node:net";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, LockLost, NoAnswer, Unavailable } from "../src/index.js";
import { startService, TOKENS } from "./service.js";

const key = () => "node/" + randomUUID();
const T = { timeout: 20_000 };

test("a lock whose service dies is told lost before its lease ends", T, async () => {
  const svc = await startService();
  const c = new Client(svc.url, { token: TOKENS.alpha, timeoutMs: 500 });
  try {
    const leaseMs = 3000;
    const lk = await c.lock(key(), { leaseMs });
    const granted = performance.now();
    await svc.kill();
    const told = await Promise.race([
      new Promise<number>((resolve) => lk.signal.addEventListener("abort", () => resolve(performance.now() - granted), { once: true })),
      sleep(leaseMs + 1000).then(() => assert.fail("no loss told after the service died")),
    ]);
    assert.ok(told < leaseMs, `the loss was told ${told} ms after the grant, not within the lease of ${leaseMs} ms`);
    assert.ok(told > leaseMs / 2, `told ${told} ms after the grant: too soon, the lease still held`);
    const reason = lk.signal.reason as LockLost;
    assert.equal(reason.kind, "expired");
    assert.match(reason.message, /^expiring/);
    assert.ok(reason.cause === undefined || reason.cause instanceof Unavailable);
  } finally {
    const start = performance.now();
    await c.close(); // the service is gone: closing still returns, soon
    assert.ok(performance.now() - start < 2000);
    await svc.stop();
  }
});

test("a service that is down is Unavailable within the timeout", T, async () => {
  // A port just freed: nothing listens on it.
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as net.AddressInfo).port;
  await new Promise((resolve) => probe.close(resolve));

  const c = new Client(`http://127.0.0.1:${port}`, { token: TOKENS.alpha, timeoutMs: 1000 });
  try {
    const start = performance.now();
    await assert.rejects(c.tryLock(key()), (e: unknown) => {
      assert.ok(e instanceof Unavailable && !(e instanceof NoAnswer), `${e}`);
      assert.equal(e.code, "unavailable");
      assert.match(e.message, /refused the connection/);
      return true;
    });
    await assert.rejects(c.lock(key()), Unavailable); // no wait either
    await assert.rejects(c.inspect(key()), Unavailable);
    await assert.rejects(c.session(), Unavailable);
    assert.ok(performance.now() - start < 1000, "not at once");
  } finally {
    await c.close();
  }
});

test("a service that never answers is NoAnswer within the timeouts", T, async () => {
  const sockets = new Set<net.Socket>();
  const mute = net.createServer((s) => {
    sockets.add(s);
    s.on("error", () => {});
  }); // accepts connections, never answers
  await new Promise<void>((resolve) => mute.listen(0, "127.0.0.1", resolve));
  const port = (mute.address() as net.AddressInfo).port;
  const timeoutMs = 300;
  const c = new Client(`http://127.0.0.1:${port}`, { token: TOKENS.alpha, timeoutMs });
  try {
    let start = performance.now();
    await assert.rejects(c.inspect(key()), NoAnswer);
    let took = performance.now() - start;
    assert.ok(took >= timeoutMs - 20 && took < timeoutMs + 500, `inspect gave up after ${took} ms`);

    start = performance.now();
    await assert.rejects(c.tryLock(key()), (e: unknown) => e instanceof NoAnswer && e instanceof Unavailable);
    took = performance.now() - start;
    // The timeout, for the call and its retries with the same request id.
    assert.ok(took < timeoutMs * 5 + 1000, `tryLock gave up after ${took} ms`);
    assert.ok(sockets.size >= 4, `the acquisition was sent ${sockets.size} times, not 4`);
  } finally {
    await c.close();
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => mute.close(resolve));
  }
});
