// Two replicas race to charge one order; the fence refuses the stale write.
//
// The worked example of docs/clients.md, in TypeScript. It reads the
// service's URL and two tokens from DISTLOCK_URL, DISTLOCK_TOKEN (a
// client's) and DISTLOCK_ADMIN_TOKEN (an admin's, for the operator's forced
// release).

import { Client } from "@distlock/client";

// Ledger stands in for the payment store: per order, the highest fence it
// has accepted, refusing a charge with a lower one. In production this is
// your database's conditional UPDATE ... WHERE fence <= $fence.
class Ledger {
  private fences = new Map<string, bigint>();

  charge(order: string, fence: bigint): void {
    const last = this.fences.get(order) ?? 0n;
    if (fence < last) throw new Error(`fence ${fence} is older than ${last}`);
    this.fences.set(order, fence);
  }
}

const url = process.env.DISTLOCK_URL!;
const ledger = new Ledger();
await using replicaA = new Client(url, { token: process.env.DISTLOCK_TOKEN });
await using replicaB = new Client(url, { token: process.env.DISTLOCK_TOKEN });
await using operator = new Client(url, { token: process.env.DISTLOCK_ADMIN_TOKEN });

const a = await replicaA.lock("orders/42", { leaseMs: 10_000, owner: "replica-a" });
console.log(`A holds orders/42 with fence ${a.fence}`);

// A stalls; an operator clears what looks like a stuck job.
await operator.forceRelease("orders/42", "replica-a looks stuck");

await using b = await replicaB.lock("orders/42", { leaseMs: 10_000, waitMs: 5_000, owner: "replica-b" });
console.log(`B holds orders/42 with fence ${b.fence}`);
ledger.charge("42", b.fence);
console.log(`B charged order 42 (fence ${b.fence})`);

// A wakes and charges as if it still held the lock.
try {
  ledger.charge("42", a.fence);
  console.error("A's stale charge was accepted");
  process.exitCode = 1;
} catch (refused) {
  console.log(`A refused: ${(refused as Error).message}`);
}
