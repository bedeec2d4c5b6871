// The worked example (examples/charge.ts), run against a service of its own.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { Client } from "../src/index.js";
import { startService, TOKENS } from "./service.js";

const example = fileURLToPath(new URL("../examples/charge.js", import.meta.url));

function run(env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [example], { env: { ...process.env, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, stdout, stderr });
    });
  });
}

test("the charge example: the fence refuses the stale write", { timeout: 60_000 }, async () => {
  const svc = await startService();
  try {
    const env = { DISTLOCK_URL: svc.url, DISTLOCK_TOKEN: TOKENS.alpha, DISTLOCK_ADMIN_TOKEN: TOKENS.admin };
    for (let i = 0; i < 2; i++) { // repeatable against the same service
      const { code, stdout, stderr } = await run(env);
      assert.equal(code, 0, `the example failed: ${stdout}${stderr}`);
      const m = /^A holds orders\/42 with fence (\d+)\nB holds orders\/42 with fence (\d+)\nB charged order 42 \(fence (\d+)\)\nA refused: fence (\d+) is older than (\d+)\n$/.exec(stdout);
      assert.ok(m, `the example did not tell the story:\n${stdout}${stderr}`);
      const [fa, fb] = [BigInt(m[1]), BigInt(m[2])];
      assert.ok(fb > fa, `fence B ${fb} is not above fence A ${fa}`);
      assert.deepEqual([m[3], m[4], m[5]], [m[2], m[1], m[2]]);
    }
    // It released what it took.
    const c = new Client(svc.url, { token: TOKENS.alpha });
    try {
      assert.equal((await c.inspect("orders/42")).held, false);
    } finally {
      await c.close();
    }
  } finally {
    await svc.stop();
  }
});
