// Package policy governs lock requests before they reach the store: lock
// groups with limits, latency-based degradation, and striped keys.
//
// A Config maps key prefixes to groups (the longest prefix wins; other keys
// fall in the default group). A group fills in a default lease, wait and max
// hold where the caller gave none, and refuses with distlock.ErrInvalidOption
// an explicit value over its maximum lease, wait or hold, naming the limit;
// it never clamps. A group's Critical flag and name label the request's
// telemetry.
//
// Degradation: the policy observes every store request of its client and
// keeps a sliding window of their latency. When the window's p99 reaches a
// group's enter threshold, that group's non-critical requests fail at once
// with distlock.ErrDegraded instead of waiting on a slow store, while
// critical groups go on waiting. The group recovers once the p99 has stayed
// under a lower leave threshold for a minimum time. The window measures the
// client's one store, all groups together: the core labels store requests
// with their backend only.
//
// A client has one backend, so a group cannot name its own store in the
// config. To keep groups on different stores, build one client (each with its
// own Policy) per store and let a Router pick the client by the key's group.
//
// Stripe splits a hot key into sub-locks, with weaker exclusion (see Stripe).
package policy
