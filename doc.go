// Package distlock provides distributed mutual exclusion over the coordination
// stores teams already run: Redis, PostgreSQL, MySQL/MariaDB, etcd, ZooKeeper and
// more, behind one API.
//
// # Clients
//
// A Client takes locks through a store's backend. Open builds one from a URL
// after a blank import of the backend package, which registers its scheme;
// New wraps a backend you built yourself. Close it when done:
//
//	import _ "github.com/distlock/distlock/backend/redislock"
//
//	client, err := distlock.Open(ctx, "redis://127.0.0.1:6379/0")
//	...
//	defer client.Close()
//
// # Locks
//
// Client.Lock waits for a key, Client.TryLock makes one attempt, and
// Client.Do runs a function while the lock is held:
//
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
// Client.RWMutex and Client.Semaphore give a name read-write or counting
// semaphore semantics on the backends that keep them; each of their holds
// is a Lock too.
//
// # Options
//
// A lock's Options (WithWait, WithLease, WithWatchdog, WithMaxHold,
// WithOwner, Reentrant, ...) and a client's ClientOptions (WithMaxLease,
// WithObserver, WithPolicy, WithBackendName) each state their default; the
// defaults and limits are the constants DefaultLease, MinLease,
// MinRenewInterval, MaxKeyLen and the like.
//
// # Errors
//
// Errors match the sentinels (ErrNotAcquired, ErrLockLost, ErrNotHeld,
// ErrInvalidKey, ErrInvalidOption, ErrDegraded, ErrClosed, ErrNoSchema)
// with errors.Is, and an error about a key is a *KeyError that names the
// operation and the key.
//
// # Operators
//
// Client.Inspect, Client.List and Client.ListPage report the store's view of
// held locks; Client.ForceRelease frees a key whoever holds it.
//
// # Observing and governing
//
// WithObserver sends the events of every lock's life to an observer (package
// observe defines them; package telemetry turns them into metrics, logs and
// traces). WithPolicy lets a Policy (package policy) adjust or refuse each
// Request before it reaches the store.
//
// # Lock services
//
// A lock service that holds locks for clients in other processes uses
// Client.AcquireToken, Client.RenewToken and Client.ReleaseToken: the
// caller's token proves the hold, and the client keeps no Lock for it.
//
// # Backends
//
// A store's backend implements package driver, as database/sql/driver is to
// database/sql, and registers its URL scheme with Register.
package distlock
