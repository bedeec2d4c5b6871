package etcdlock

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// etcd's client multiplexes the watches that share a context's metadata on
// one stream and creates them there one at a time. Holders' loss watches and
// waiters' predecessor watches get a stream each, so that the watches holders
// open on every grant never delay a waiter's.
var holdWatchContext = metadata.AppendToOutgoingContext(context.Background(), "distlock-watch", "hold")

func waitWatchContext(ctx context.Context) context.Context {
	return clientv3.WithRequireLeader(metadata.AppendToOutgoingContext(ctx, "distlock-watch", "wait"))
}

// watchDeleted blocks until entry, created at revision rev, is deleted (it
// returns true) or ctx ends (false). A watch that breaks (compaction, a
// closing client) is resumed after a look at the entry.
func (b *Backend) watchDeleted(ctx context.Context, entry string, rev int64) bool {
	from := rev + 1
	retry := time.Duration(0)
	for {
		wch := b.holdWatches.Watch(ctx, entry, clientv3.WithRev(from), clientv3.WithFilterPut())
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return true
				}
			}
			from = wr.Header.Revision + 1
		}
		if ctx.Err() != nil {
			return false
		}
		retry = min(max(2*retry, 50*time.Millisecond), 2*time.Second)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(retry):
		}
		resp, err := b.cli.Get(ctx, entry, clientv3.WithCountOnly())
		if err == nil {
			if resp.Count == 0 {
				return true
			}
			from = resp.Header.Revision + 1
		}
	}
}
