package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
)

// Backend returns a backend over the store whose reads and writes (etcd's
// KV calls: every grant's and release's transaction) call the store's
// server in this process, as etcd's own lock service does: no socket, no
// gRPC encoding, no HTTP/2 framing on either side. Its watches and lease
// renewals, which are streams, go through the socket: etcd's in-process
// streams pass messages over unbuffered channels, and a storm of watch
// cancellations (each release cancels its hold's watch) deadlocks them
// (etcd-io/etcd#18879, #20716), where a socket's buffers do not.
//
// No other process reaches the store but through the socket, so no client
// of an earlier release can share its queues: the backend links its
// waiters (etcdlock.WithLinkedQueue) and moves the store to the ordered
// key layout, whose List pages read about a page, at any start at which it
// holds no lock. One that an earlier release left holding locks keeps the
// escaped layout until such a start, and log is told so.
//
// The backend's Close closes its etcd client; close it before the store.
// After the store's Close, Backend returns an error matching
// driver.ErrClosed.
func (e *Etcd) Backend(ctx context.Context, log *slog.Logger) (driver.Backend, error) {
	cli, err := e.inProcessClient()
	if err != nil {
		return nil, err
	}
	eb, err := etcdlock.New(cli, etcdlock.WithLinkedQueue())
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	b := &ownBackend{Backend: eb, cli: cli}
	moved, err := eb.MoveKeyLayout(ctx, etcdlock.KeyLayoutOrdered)
	var layout etcdlock.KeyLayout
	if err == nil && !moved {
		layout, err = eb.KeyLayout(ctx)
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	if !moved && layout != etcdlock.KeyLayoutOrdered && log != nil {
		log.Warn("the embedded store holds locks in the key layout of an earlier release, in which each List page "+
			"reads every key; it moves to the ordered layout at a start at which no lock is held", "key_layout", layout)
	}
	return b, nil
}

// inProcessClient returns a client of the store whose KV calls go to the
// server in this process and whose streams go through the socket.
func (e *Etcd) inProcessClient() (*clientv3.Client, error) {
	if e.closing.Load() {
		return nil, fmt.Errorf("embedetcd: %w", driver.ErrClosed)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: etcdlock.DefaultDialTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("embedetcd: %w", err)
	}
	cli.KV = clientv3.NewKVFromKVClient(adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.e.Server)), cli)
	return cli, nil
}

// ownBackend is a backend that closes its etcd client.
type ownBackend struct {
	*etcdlock.Backend
	cli       *clientv3.Client
	closeOnce sync.Once
	closeErr  error
}

// Close closes the backend, then its client. Closing twice is harmless.
func (b *ownBackend) Close() error {
	b.closeOnce.Do(func() { b.closeErr = errors.Join(b.Backend.Close(), b.cli.Close()) })
	return b.closeErr
}
