package etcdlock

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// renewer renews leases, one request each, over LeaseKeepAlive streams that
// it keeps open. clientv3's KeepAliveOnce opens a stream for every renewal,
// which costs the client and etcd more than the renewal does, and a backend
// renews every lock it holds or waits for a third of its TTL. etcd serves a
// stream's requests one after another, so a lease's renewals go to one of
// renewStreams streams, chosen by its ID.
type renewer struct {
	streams []*renewStream
}

// renewStreams is the number of streams a renewer keeps.
const renewStreams = 4

func newRenewer(cli *clientv3.Client, streams int) *renewer {
	r := &renewer{streams: make([]*renewStream, streams)}
	for i := range r.streams {
		r.streams[i] = &renewStream{cli: cli, waiting: make(map[clientv3.LeaseID][]chan renewal)}
	}
	return r
}

// keepAlive renews lease id for its full TTL and returns that TTL, as
// KeepAliveOnce does: an error matching rpctypes.ErrLeaseNotFound if the
// lease is gone.
func (r *renewer) keepAlive(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	return r.streams[uint64(id)%uint64(len(r.streams))].keepAlive(ctx, id)
}

// close ends the streams; renewals fail from then on.
func (r *renewer) close() {
	for _, s := range r.streams {
		s.close()
	}
}

// renewStream is one stream of a renewer. etcd answers a stream's requests
// in order, so the answer for a lease goes to the oldest renewal of that
// lease still waiting. A stream that fails fails every renewal waiting on
// it; the next renewal opens another.
type renewStream struct {
	cli *clientv3.Client

	mu      sync.Mutex
	closed  bool
	stream  pb.Lease_LeaseKeepAliveClient // nil until a renewal opens one
	stop    context.CancelFunc            // ends stream
	waiting map[clientv3.LeaseID][]chan renewal
	recv    sync.WaitGroup // the goroutine that reads stream's answers
}

// renewal is a lease's answer: its TTL in seconds, or why there is none.
type renewal struct {
	ttl int64
	err error
}

// errRenewerClosed is the error of a renewal after close.
var errRenewerClosed = errors.New("etcdlock: lease renewals closed")

func (r *renewStream) keepAlive(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	answer := make(chan renewal, 1) // read by nobody once ctx ends
	r.mu.Lock()
	if err := r.openLocked(); err != nil {
		r.mu.Unlock()
		return 0, err
	}
	r.waiting[id] = append(r.waiting[id], answer)
	if err := r.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		r.failLocked(r.stream, err) // answers this renewal too
	}
	r.mu.Unlock()
	select {
	case a := <-answer:
		if a.err == nil && a.ttl <= 0 {
			a.err = rpctypes.ErrLeaseNotFound
		}
		return a.ttl, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// openLocked opens the stream if none is open. r.mu must be held.
func (r *renewStream) openLocked() error {
	switch {
	case r.closed:
		return errRenewerClosed
	case r.stream != nil:
		return nil
	}
	ctx, stop := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	stream, err := pb.NewLeaseClient(r.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		stop()
		return err
	}
	r.stream, r.stop = stream, stop
	r.recv.Add(1)
	go r.read(stream)
	return nil
}

// read hands stream's answers to the renewals waiting for them until the
// stream fails.
func (r *renewStream) read(stream pb.Lease_LeaseKeepAliveClient) {
	defer r.recv.Done()
	for {
		resp, err := stream.Recv()
		r.mu.Lock()
		if err != nil {
			r.failLocked(stream, err)
			r.mu.Unlock()
			return
		}
		id := clientv3.LeaseID(resp.ID)
		if q := r.waiting[id]; len(q) > 0 {
			q[0] <- renewal{ttl: resp.TTL}
			if len(q) == 1 {
				delete(r.waiting, id)
			} else {
				r.waiting[id] = q[1:]
			}
		}
		r.mu.Unlock()
	}
}

// failLocked ends stream, if it is still the renewer's, and fails every
// renewal waiting on it with err. r.mu must be held.
func (r *renewStream) failLocked(stream pb.Lease_LeaseKeepAliveClient, err error) {
	if r.stream != stream {
		return
	}
	r.stop()
	r.stream = nil
	for id, q := range r.waiting {
		for _, answer := range q {
			answer <- renewal{err: err}
		}
		delete(r.waiting, id)
	}
}

// close ends the stream and waits until its reader is done; renewals fail
// from then on.
func (r *renewStream) close() {
	r.mu.Lock()
	r.closed = true
	if r.stream != nil {
		r.failLocked(r.stream, errRenewerClosed)
	}
	r.mu.Unlock()
	r.recv.Wait()
}
