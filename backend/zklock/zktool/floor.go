package zktool

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/storetool/floor"
)

// zkFloorRoot is the parent of the floor's nodes.
const zkFloorRoot = "/distlock-bench-floor"

// zooKeeperFloor creates an ephemeral node named after the key, which fails
// if it exists, and deletes it; each client has a session of its own.
type zooKeeperFloor struct{ conns []*zk.Conn }

// openZooKeeperFloor opens cfg.Clients sessions on the URL's servers, read
// by zklock.ParseURL, each with its session timeout and within its dial
// timeout, and creates the floor's root.
func openZooKeeperFloor(ctx context.Context, u *url.URL, cfg floor.Config) (floor.Target, error) {
	zc, err := zklock.ParseURL(u)
	if err != nil {
		return nil, err
	}
	f := &zooKeeperFloor{}
	for range cfg.Clients {
		c, err := zkSession(ctx, zc.Servers, zc.SessionTimeout(), zc.DialTimeout())
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		f.conns = append(f.conns, c)
	}
	if _, err := f.conns[0].Create(zkFloorRoot, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return nil, errors.Join(fmt.Errorf("create %s: %w", zkFloorRoot, err), f.Close())
	}
	return f, nil
}

// zkSession connects to servers and waits for a session, at most connect.
func zkSession(ctx context.Context, servers []string, session, connect time.Duration) (*zk.Conn, error) {
	c, events, err := zk.Connect(servers, session, zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(connect)
	defer t.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c, nil
			}
		case <-t.C:
			c.Close()
			return nil, fmt.Errorf("no ZooKeeper session within %v", connect)
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

// quietZK drops go-zookeeper's log lines, which would garble the table.
type quietZK struct{}

// Printf discards the line.
func (quietZK) Printf(string, ...any) {}

// Lock creates the key's ephemeral node in the worker's session.
func (f *zooKeeperFloor) Lock(_ context.Context, w int, key string) (func(context.Context) error, error) {
	c, node := f.conns[w%len(f.conns)], zkFloorRoot+"/"+url.PathEscape(key)
	if _, err := c.Create(node, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			return nil, distlock.ErrNotAcquired
		}
		return nil, fmt.Errorf("create %s: %w", node, err)
	}
	return func(context.Context) error {
		err := c.Delete(node, -1)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return fmt.Errorf("delete %s: %w", node, distlock.ErrNotHeld)
		case err != nil:
			return fmt.Errorf("delete %s: %w", node, err)
		}
		return nil
	}, nil
}

// close deletes the root if it is empty and ends the sessions.
func (f *zooKeeperFloor) Close() error {
	if len(f.conns) > 0 {
		_ = f.conns[0].Delete(zkFloorRoot, -1) // another run may still use it
	}
	for _, c := range f.conns {
		c.Close()
	}
	return nil
}
