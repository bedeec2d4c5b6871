// Starts a real `distlock serve` (the binary DISTLOCK_BIN names) on a free
// loopback port over its embedded store, with a token file of two tenants.

import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const TOKENS = {
  alpha: "alpha-client-token-00001",
  beta: "beta-client-token-000001",
  viewer: "alpha-viewer-token-00001",
  admin: "alpha-admin-token-000001",
} as const;

/** A serve process of its own. */
export interface Service {
  url: string;
  proc: ChildProcess;
  /** Kills it (SIGKILL) and waits for it to end. */
  kill(): Promise<void>;
  /** Stops it (SIGTERM, then SIGKILL after 30 s) and removes its files. */
  stop(): Promise<void>;
}

function binary(): string {
  const bin = process.env.DISTLOCK_BIN;
  const how =
    "DISTLOCK_BIN must name a distlock binary: make build (at the repository's root) makes bin/distlock, " +
    "then DISTLOCK_BIN=$PWD/../../bin/distlock npm test in clients/node; make test does both";
  if (!bin) throw new Error(how);
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`${bin} is not an executable: ${how}`);
  }
  return bin;
}

/**
 * Starts serve with extra flags (over the embedded store unless they name a
 * --backend); resolves once it says where it listens.
 */
export async function startService(...flags: string[]): Promise<Service> {
  const bin = binary();
  // The embedded store syncs its log to disk on every write; a disk that
  // takes seconds over a sync now and then would stall the tests that long.
  // In memory (/dev/shm, where the machine has it) it does not.
  const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "distlock-node-"));
  const tokens = join(dir, "tokens");
  writeFileSync(
    tokens,
    `${TOKENS.alpha} alpha client\n${TOKENS.beta} beta client\n` + `${TOKENS.viewer} alpha viewer\n${TOKENS.admin} alpha admin\n`,
    { mode: 0o600 },
  );
  const store = flags.includes("--backend") ? [] : ["--data-dir", join(dir, "data")];
  const proc = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--tokens", tokens, ...store, "-o", "json", ...flags], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  proc.stderr!.on("data", (b: Buffer) => {
    if (stderr.length < 64 * 1024) stderr += b.toString();
  });
  // A test process that dies takes its service along.
  const orphan = () => {
    proc.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", orphan);
  const ended = new Promise<void>((resolve) =>
    proc.once("exit", () => {
      process.off("exit", orphan);
      resolve();
    }),
  );
  const gone = async (signal: NodeJS.Signals) => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
    await ended;
  };
  const stop = async () => {
    const force = setTimeout(() => proc.kill("SIGKILL"), 30_000);
    await gone("SIGTERM");
    clearTimeout(force);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let text = "";
      const timer = setTimeout(() => reject(new Error(`serve did not say where it listens within 30s: ${stderr}`)), 30_000);
      const onData = (b: Buffer) => {
        text += b.toString();
        // The first JSON object says where it listens; it ends with a line "}".
        const end = text.search(/^}/m);
        if (end < 0) return;
        clearTimeout(timer);
        proc.stdout!.off("data", onData);
        try {
          resolve(JSON.parse(text.slice(0, end + 1)).url);
        } catch (e) {
          reject(new Error(`serve's first output is not JSON: ${text}`, { cause: e }));
        }
      };
      proc.stdout!.on("data", onData);
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`serve exited (${code}) before it listened: ${stderr}`));
      });
    });
    proc.stdout!.resume(); // the rest of its output is not read
    return { url, proc, kill: () => gone("SIGKILL"), stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
