package redislock

import (
	"context"
	"time"
)

// store is what the lock logic needs from a Redis client. One adapter per
// client library implements it (goredis.go, rueidis.go); everything else is
// shared.
type store interface {
	// evalInt runs s and returns its integer reply.
	evalInt(ctx context.Context, s script, keys []string, args ...string) (int64, error)
	// evalStrings runs s and returns its reply, an array of strings.
	evalStrings(ctx context.Context, s script, keys []string, args ...string) ([]string, error)
	// evalIntAcked runs s and then WAIT replicas wait, pipelined on one
	// connection (on a Cluster, to the master of the keys' slot), and
	// returns the script's integer reply and how many replicas acknowledged
	// every write that connection made, the script's included. wait is at
	// least a millisecond: WAIT 0 would block for ever.
	evalIntAcked(ctx context.Context, s script, keys []string, args []string, replicas int, wait time.Duration) (n int64, acked int, err error)
	// scan calls fn with every key matching the SCAN pattern match, on every
	// master; a key may come more than once.
	scan(ctx context.Context, match string, fn func(key string)) error
	// newPubSub returns the backend's subscription, which reports to ev:
	// one connection, or on a Cluster one per master (fanout). It connects
	// on the first subscribe.
	newPubSub(ev pubsubEvents) pubsub
	// serverInfo returns the reply of INFO server of every node the client
	// reaches (every master of a Cluster).
	serverInfo(ctx context.Context) ([]string, error)
	// sharded reports whether keys may live on different nodes (a Cluster,
	// a Ring), so that one script cannot name keys of different locks.
	sharded() bool
	// closedErr reports whether err says that the client was closed
	// (go-redis's ErrClosed, rueidis's ErrClosing).
	closedErr(err error) bool
	// close closes the client if the backend built it.
	close() error
}

// pubsub is the subscription shared by all of a backend's waiters.
type pubsub interface {
	// subscribe sends SUBSCRIBE for channels; confirmations come through
	// pubsubEvents.subscribed.
	subscribe(ctx context.Context, channels []string) error
	// close closes the connection; no event is reported after it returns.
	close() error
}

// pubsubEvents receive what arrives on the subscription connection. They run
// on the connection's reader and must not block.
type pubsubEvents struct {
	// message: a message with payload on channel.
	message func(channel, payload string)
	// subscribed: the server confirmed a subscription to channel.
	subscribed func(channel string)
	// lost: the connection failed; subscriptions must be sent again and
	// notices may have been missed.
	lost func()
}
