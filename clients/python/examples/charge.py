"""Two replicas race to charge one order; the fence refuses the stale write.

The worked example of docs/clients.md, in Python. It reads the service's URL
and two tokens from DISTLOCK_URL, DISTLOCK_TOKEN (a client's) and
DISTLOCK_ADMIN_TOKEN (an admin's, for the operator's forced release)."""

import os
import sys

import distlock


class Ledger:
    """Stands in for the payment store: per order, the highest fence it has
    accepted, refusing a charge with a lower one. In production this is
    your database's conditional UPDATE ... WHERE fence <= $fence."""

    def __init__(self):
        self.fences = {}

    def charge(self, order, fence):
        if fence < self.fences.get(order, 0):
            raise ValueError(f"fence {fence} is older than {self.fences[order]}")
        self.fences[order] = fence


def main():
    url = os.environ["DISTLOCK_URL"]
    ledger = Ledger()
    with distlock.Client(url, token=os.environ["DISTLOCK_TOKEN"]) as replica_a, \
            distlock.Client(url, token=os.environ["DISTLOCK_TOKEN"]) as replica_b, \
            distlock.Client(url, token=os.environ["DISTLOCK_ADMIN_TOKEN"]) as operator:
        a = replica_a.lock("orders/42", lease=10, owner="replica-a")
        print(f"A holds orders/42 with fence {a.fence}")

        # A stalls; an operator clears what looks like a stuck job.
        operator.force_release("orders/42", "replica-a looks stuck")

        with replica_b.lock("orders/42", lease=10, wait=5, owner="replica-b") as b:
            print(f"B holds orders/42 with fence {b.fence}")
            ledger.charge("42", b.fence)
            print(f"B charged order 42 (fence {b.fence})")

            # A wakes and charges as if it still held the lock.
            try:
                ledger.charge("42", a.fence)
            except ValueError as refused:
                print(f"A refused: {refused}")
            else:
                sys.exit("A's stale charge was accepted")


if __name__ == "__main__":
    main()
