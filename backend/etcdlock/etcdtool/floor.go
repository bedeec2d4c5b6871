package etcdtool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/storetool/floor"
)

// etcdFloor is a transaction that puts the key if it has no create
// revision, on a lease granted once per client, and a transaction that
// deletes it if it holds the token.
type etcdFloor struct {
	clients []*clientv3.Client
	leases  []clientv3.LeaseID
	tokens  []string
}

// openEtcdFloor connects cfg.Clients etcd clients to the URL's endpoints,
// read by etcdlock.ParseURL, within its dial timeout, and grants each a
// lease of cfg.Lease (whole seconds, at least one).
func openEtcdFloor(ctx context.Context, u *url.URL, cfg floor.Config) (floor.Target, error) {
	ec, err := etcdlock.ParseURL(u)
	if err != nil {
		return nil, err
	}
	eps, dial := ec.Endpoints, ec.DialTimeout()
	ttl := int64(max(1, math.Ceil(cfg.Lease.Seconds())))
	f := &etcdFloor{tokens: floor.Tokens(cfg.Workers)}
	for range cfg.Clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: dial, Logger: zap.NewNop(), Context: ctx})
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		f.clients = append(f.clients, c)
		gctx, cancel := context.WithTimeout(ctx, dial)
		l, err := c.Grant(gctx, ttl)
		cancel()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("grant a lease: %w", err), f.Close())
		}
		f.leases = append(f.leases, l.ID)
	}
	return f, nil
}

// Lock puts key if it is absent, on the worker's client's lease.
func (f *etcdFloor) Lock(ctx context.Context, w int, key string) (func(context.Context) error, error) {
	i := w % len(f.clients)
	c, k, tok := f.clients[i], floor.KeyPrefix+key, f.tokens[w]
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, tok, clientv3.WithLease(f.leases[i]))).Commit()
	if err != nil {
		return nil, fmt.Errorf("put-if-absent %s: %w", k, err)
	}
	if !resp.Succeeded {
		return nil, distlock.ErrNotAcquired
	}
	return func(ctx context.Context) error {
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", tok)).Then(clientv3.OpDelete(k)).Commit()
		switch {
		case err != nil:
			return fmt.Errorf("delete-if-held %s: %w", k, err)
		case !resp.Succeeded:
			return fmt.Errorf("delete %s: %w", k, distlock.ErrNotHeld)
		}
		return nil
	}, nil
}

// close revokes the leases, which deletes any key left, and closes the
// clients.
func (f *etcdFloor) Close() error {
	var errs []error
	for i, c := range f.clients {
		if i < len(f.leases) {
			ctx, cancel := context.WithTimeout(context.Background(), etcdlock.DefaultRequestTimeout)
			_, err := c.Revoke(ctx, f.leases[i])
			cancel()
			errs = append(errs, err)
		}
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
