package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// Watch streams the changes of the caller's keys under a prefix. It reads
// the store once when it begins, then takes the readings of the tenant's
// keys that all its streams share (polls): of the keys the store's notices
// name, where the store tells of changes, else of every key each
// Limits.WatchInterval. It reports the difference by (key, fence): a new
// one was ACQUIRED; one gone EXPIRED if the TTL it had when last seen has
// run out by now (give or take an interval), else was RELEASED. The grants,
// releases and forced releases made through this server come at once, and
// the readings do not report them again. A change through another server
// that comes and goes before the key is read is not seen.
//
// The response headers are sent once the watch has read the store's state:
// a caller that waits for them knows that every change after is reported.
// The stream ends with Unavailable at Shutdown, when the store fails, or
// when it has lasted Limits.MaxStreamLifetime.
func (h *service) Watch(ctx context.Context, req *connect.Request[distlockv1.WatchRequest], stream *connect.ServerStream[distlockv1.WatchResponse]) error {
	return h.s.follow(ctx, req.Msg.GetPrefix(), func() error { stream.ResponseHeader().Set(liveHeader, "1"); return nil },
		func(e *distlockv1.Event) error { return stream.Send(&distlockv1.WatchResponse{Event: e}) })
}

// follow streams the events of the caller's tenant's keys under prefix to
// send until the stream's lifetime, Shutdown or ctx ends it, counted
// against the tenant's streams. live is called once the stream has begun,
// before the first event, to set its response headers (and send what the
// stream begins with); its error ends the stream.
func (s *Server) follow(ctx context.Context, prefix string, live func() error, send func(*distlockv1.Event) error) error {
	noteKey(ctx, short(prefix))
	if err := s.limits.checkPrefix(prefix); err != nil {
		return err
	}
	tenant := callOf(ctx).id.Tenant
	done, err := s.streams.take(tenant)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeoutCause(ctx, s.limits.MaxStreamLifetime, errEnded{connect.NewError(connect.CodeUnavailable,
		fmt.Errorf("the stream reached its lifetime of %v: open it again", s.limits.MaxStreamLifetime))})
	defer cancel()
	defer context.AfterFunc(s.stopCtx, cancel)()

	sub := s.events.subscribe(tenant)
	defer s.events.unsubscribe(sub)
	feed := s.polls.subscribe(tenant)
	defer s.polls.unsubscribe(tenant, feed)
	w := &watcher{
		root: namespace(tenant) + prefix, interval: s.limits.WatchInterval, since: time.Now(),
		seen: make(map[string]sighting), ended: make(map[string]tombstone),
	}
	failed := func(err error) error {
		if ended := watchEnded(ctx, s); ended != nil {
			return ended
		}
		return s.storeError(ctx, "watch", prefix, w.root, err)
	}
	infos, err := s.store.List(ctx, w.root)
	if err != nil {
		return failed(err)
	}
	w.baseline(infos, time.Now())
	// Tell the caller it is live: a stream's headers go out with its first
	// message, which may come much later, and Connect's clients wait for
	// them. A response header set through the stream too keeps gRPC-Web's
	// status in trailers, where a trailers-only answer would put it in the
	// headers already sent.
	if err := live(); err != nil {
		return err
	}
	callOf(ctx).live()
	for {
		var events []*distlockv1.Event
		select {
		case <-ctx.Done():
			return watchEnded(ctx, s)
		case c := <-sub.ch:
			events = w.apply(c, time.Now())
		case <-feed.ready:
			// A change is published before a reading that may show it
			// begins: apply those pending first, or the reading would
			// report a forced release as a key found gone (RELEASED).
			events = w.applyPending(sub)
			readings, behind := feed.take()
			if behind { // the readings it missed are older than this one
				start := time.Now()
				var infos []distlock.Info
				unread := s.polls.reading(tenant, func() { infos, err = s.store.List(ctx, w.root) })
				if err != nil {
					return failed(err)
				}
				infos = slices.DeleteFunc(infos, func(i distlock.Info) bool { return unread[i.Key] })
				slices.SortFunc(infos, func(a, b distlock.Info) int { return strings.Compare(a.Key, b.Key) })
				events = append(events, w.diff(infos, unread, start, time.Now())...)
				readings = nil
			}
			for _, r := range readings {
				switch {
				case r.err != nil:
					return failed(r.err)
				case r.start.Before(w.since):
					continue // older than the baseline: it may show holds since ended
				case r.keys == nil:
					events = append(events, w.diff(r.infos, r.unread, r.start, time.Now())...)
				default:
					events = append(events, w.patch(r.keys, r.infos, r.start, time.Now())...)
				}
			}
		}
		for _, e := range events {
			if err := send(e); err != nil {
				return err
			}
		}
	}
}

// watchEnded returns why a Watch's context ended, if it did: Shutdown, its
// lifetime, its token's removal, or its caller.
func watchEnded(ctx context.Context, s *Server) error {
	switch ended, ok := endedBy(ctx); {
	case s.stopping.Load():
		return errShutdown()
	case ok:
		return ended
	}
	return ctx.Err()
}

// liveHeader is the response header of a Watch that has begun.
const liveHeader = "Distlock-Watch-Live"

// watcher is the state of one Watch: the locks it has reported held, and
// those it has reported ended, so that neither a poll nor a change reports
// either twice.
type watcher struct {
	root     string // the store prefix watched
	interval time.Duration
	since    time.Time // when the Watch began: changes after it are news
	seen     map[string]sighting
	ended    map[string]tombstone
}

// sighting is a lock as last seen held.
type sighting struct {
	info     distlock.Info
	at       time.Time // when it was last confirmed held
	baseline bool      // held when the Watch began, and not reported
	token    string    // of a grant through this server; "" if only read from the store
}

// tombstone is the end of a key's holds up to a fence, reported at at.
// Fence 0 is a release through this server of a hold the watcher never saw:
// then only polls begun after at may report the key.
type tombstone struct {
	fence uint64
	at    time.Time
}

// baseline records the locks held when the Watch began: they are no news.
func (w *watcher) baseline(infos []distlock.Info, now time.Time) {
	for _, i := range infos {
		if strings.HasPrefix(i.Key, w.root) {
			w.seen[i.Key] = sighting{info: i, at: now, baseline: true}
		}
	}
}

// apply turns a change made through this server into events.
func (w *watcher) apply(c change, now time.Time) []*distlockv1.Event {
	sk := c.info.Key
	if !strings.HasPrefix(sk, w.root) {
		return nil
	}
	old, wasSeen := w.seen[sk]
	var events []*distlockv1.Event
	switch c.typ {
	case distlockv1.Event_TYPE_ACQUIRED:
		if t, ok := w.ended[sk]; ok && t.fence >= c.info.Fence {
			return nil
		}
		if wasSeen && old.info.Fence >= c.info.Fence && !(old.baseline && !c.at.Before(w.since)) {
			if old.info.Fence == c.info.Fence && old.token == "" {
				old.token = c.token // a reading found it first: now its release can be told apart
				w.seen[sk] = old
			}
			return nil
		}
		if wasSeen && old.info.Fence < c.info.Fence {
			events = append(events, w.end(sk, old, now, 0)) // it ended before this grant
		}
		w.seen[sk] = sighting{info: c.info, at: now, token: c.token}
		return append(events, event(distlockv1.Event_TYPE_ACQUIRED, sk, c.info, c.at))
	case distlockv1.Event_TYPE_RELEASED:
		if !wasSeen {
			w.bury(sk, 0, now)
			return nil
		}
		if c.token != "" && old.token != c.token {
			// Of a hold before the one seen, whose grant reported its end;
			// or, where a reading found the hold and no grant named its
			// token, of a hold that cannot be told apart from it: the next
			// reading says whether the one seen ended.
			return nil
		}
		delete(w.seen, sk)
		w.bury(sk, old.info.Fence, now)
		return []*distlockv1.Event{event(distlockv1.Event_TYPE_RELEASED, sk, old.info, c.at)}
	case distlockv1.Event_TYPE_RELEASE_REQUESTED:
		e := event(c.typ, sk, c.info, c.at)
		e.Lock.Held, e.Reason = true, c.reason
		return []*distlockv1.Event{e}
	case distlockv1.Event_TYPE_FORCE_RELEASED:
		w.bury(sk, max(c.info.Fence, old.info.Fence), now)
		if !wasSeen {
			return nil
		}
		delete(w.seen, sk)
		return []*distlockv1.Event{event(distlockv1.Event_TYPE_FORCE_RELEASED, sk, c.info, c.at)}
	}
	return nil
}

// applyPending turns the changes pending in sub into events.
func (w *watcher) applyPending(sub *subscription) []*distlockv1.Event {
	var events []*distlockv1.Event
	for {
		select {
		case c := <-sub.ch:
			events = append(events, w.apply(c, time.Now())...)
		default:
			return events
		}
	}
}

// diff turns a poll of every key begun at start, sorted by key, into
// events, in key order. It says nothing of the keys unread, which are not
// in infos. It does not change infos.
func (w *watcher) diff(infos []distlock.Info, unread map[string]bool, start, now time.Time) []*distlockv1.Event {
	var events []*distlockv1.Event
	held := make(map[string]bool, len(infos))
	for _, i := range infos {
		if strings.HasPrefix(i.Key, w.root) {
			held[i.Key] = true
			events = append(events, w.sighted(i, start, now)...)
		}
	}
	gone := make([]string, 0)
	for sk, old := range w.seen {
		if !held[sk] && !unread[sk] && old.at.Before(start) { // a sighting after start may be newer than the poll
			gone = append(gone, sk)
		}
	}
	slices.Sort(gone)
	for _, sk := range gone {
		events = append(events, w.end(sk, w.seen[sk], now, w.slack()))
		delete(w.seen, sk)
	}
	for sk, t := range w.ended { // every later poll begins after these ends
		if t.at.Before(start) && !unread[sk] {
			delete(w.ended, sk)
		}
	}
	return events
}

// patch turns a reading of some keys begun at start, sorted, of which infos
// are the held ones, into events, in key order. It does not change infos.
func (w *watcher) patch(keys []string, infos []distlock.Info, start, now time.Time) []*distlockv1.Event {
	var events []*distlockv1.Event
	held := make(map[string]distlock.Info, len(infos))
	for _, i := range infos {
		held[i.Key] = i
	}
	for _, sk := range keys {
		if !strings.HasPrefix(sk, w.root) {
			continue
		}
		if i, ok := held[sk]; ok {
			events = append(events, w.sighted(i, start, now)...)
		} else if old, ok := w.seen[sk]; ok && old.at.Before(start) {
			events = append(events, w.end(sk, old, now, w.slack()))
			delete(w.seen, sk)
		}
		if t, ok := w.ended[sk]; ok && t.at.Before(start) { // every later reading begins after it
			delete(w.ended, sk)
		}
	}
	return events
}

// sighted turns a lock read held by a reading begun at start into events:
// none if the watcher knows the hold, else ACQUIRED, after the end of the
// hold it replaced.
func (w *watcher) sighted(i distlock.Info, start, now time.Time) []*distlockv1.Event {
	sk := i.Key
	if t, ok := w.ended[sk]; ok && (i.Fence <= t.fence || (t.fence == 0 && start.Before(t.at))) {
		return nil // a hold whose end this watcher reported already
	}
	old, wasSeen := w.seen[sk]
	if wasSeen && old.info.Fence == i.Fence {
		w.seen[sk] = sighting{info: i, at: now, baseline: old.baseline, token: old.token}
		return nil
	}
	var events []*distlockv1.Event
	if wasSeen {
		events = append(events, w.end(sk, old, now, w.slack()))
	}
	w.seen[sk] = sighting{info: i, at: now}
	return append(events, event(distlockv1.Event_TYPE_ACQUIRED, sk, i, now))
}

// slack is how early a hold found gone by a reading may have run out of
// its TTL as last seen and still be reported EXPIRED: the interval between
// readings, at most expirySlack. (A reading whose interval is long found
// the key gone just now, whatever the interval.)
func (w *watcher) slack() time.Duration { return min(w.interval, expirySlack) }

// end reports a hold found gone: EXPIRED if its TTL when last seen has run
// out by now, with slack (a reading's, for a hold found gone by one), else
// RELEASED.
func (w *watcher) end(sk string, old sighting, now time.Time, slack time.Duration) *distlockv1.Event {
	w.bury(sk, old.info.Fence, now)
	typ := distlockv1.Event_TYPE_RELEASED
	if old.info.TTL <= now.Sub(old.at)+slack {
		typ = distlockv1.Event_TYPE_EXPIRED
	}
	return event(typ, sk, old.info, now)
}

// bury records that sk's holds up to fence have ended.
func (w *watcher) bury(sk string, fence uint64, at time.Time) {
	if t, ok := w.ended[sk]; ok && t.fence > fence {
		fence = t.fence
	}
	w.ended[sk] = tombstone{fence: fence, at: at}
}

// event is the Event of a lock of the watched tenant at a time. The lock is
// the holder as granted, or for an end as last seen, then no longer held.
func event(typ distlockv1.Event_Type, sk string, info distlock.Info, at time.Time) *distlockv1.Event {
	_, key, _ := splitStoreKey(sk)
	info.Held = true
	l := lockOf(key, "", info)
	l.Held = typ == distlockv1.Event_TYPE_ACQUIRED
	return &distlockv1.Event{Type: typ, Lock: l, Time: timestamppb.New(at)}
}
