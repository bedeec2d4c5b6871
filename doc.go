// Package distlock provides distributed mutual exclusion over the coordination
// stores teams already run: Redis, PostgreSQL, MySQL/MariaDB, etcd, ZooKeeper and
// more, behind one API.
//
// A Client wraps a driver.Backend (a store driver). Client.Lock waits for a key,
// Client.TryLock makes one attempt, and Client.Do runs a function while the lock
// is held:
//
//	client := distlock.New(backend)
//	err := client.Do(ctx, "order:42", func(ctx context.Context, l *distlock.Lock) error {
//		return charge(ctx, l.Fence())
//	})
//
// Every acquisition gets a fresh 128-bit random token, and release and renewal
// compare it atomically in the store, so a holder can never release someone
// else's lock. Each grant carries a fencing token (Lock.Fence) that strictly
// increases per key; pass it to the resource you protect so that it can reject
// writes from a holder whose lock has expired (see package fence).
//
// Without an explicit lease the lock is renewed by a watchdog every lease/3
// while it is held. A lock can still be lost: a long GC pause, a network
// partition or a store failover can end it behind the holder's back. It is NOT
// safe to assume that the lock is held until Release returns; watch Lock.Done
// or use Lock.Context, and let the protected resource check fences.
//
// Backends register URL schemes, so Open can build a client from a URL after a
// blank import of the backend package:
//
//	import _ "github.com/distlock/distlock/backend/memlock"
//	client, err := distlock.Open(ctx, "mem://")
package distlock
