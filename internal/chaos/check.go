package chaos

import (
	"fmt"
	"math"
	"sort"
)

// Report is what Check found in a history.
type Report struct {
	Ops      int // grants
	Writes   int // writes accepted by a resource
	Overlaps int // holders that another holder joined inside a resource's critical section
	// OverlapsUntold counts the overlaps whose earlier holder had not been
	// told of its loss when the later one entered: two holders, neither
	// knowing. The rest were told in time (a lease that ended, noticed,
	// while its holder was still finishing its work inside).
	OverlapsUntold int
	// Unfinished counts overlaps with a holder that had released without
	// the resource recording its exit: an error of the run, not of the
	// lock, which fails the scenario whatever the backend promises.
	Unfinished    int
	Regressions   int // grants whose fence did not exceed the fence of an earlier grant
	StaleRejected int // writes a resource refused for a stale fence
	StaleAccepted int // writes a resource accepted with a stale fence
	LateLoss      int // holders told of their loss only after a later holder wrote (or never)
	// Findings describes each violation, for the log.
	Findings []string
}

type acq struct {
	nonce, key  string
	sent, grant int64 // 0: not seen
	fence       uint64
	end         int64 // release sent or loss noticed, whichever first; MaxInt64 if neither
	loss        int64
	released    int64  // release sent; 0 if never
	reason      string // of the loss
	firstWrite  int64  // first accepted write at any resource; 0 if none
	granted     bool
}

type write struct {
	resource, key, nonce string
	fence                uint64
	seq, in, out         int64
	overtaken            bool // another acquisition entered while it was inside
}

// Check judges a history (sorted with Sort):
//
//  1. overlap: two acquisitions inside one resource's critical section for
//     one key at once (from WriteAccepted to WriteDone);
//  2. regression: a grant whose fence is not above the fence of a grant of
//     the same key that came before its acquire was sent;
//  3. stale accepted: a resource, in its own order, accepted a fence below
//     the highest it had accepted for the key, or equal to it from another
//     acquisition;
//  4. late loss: an acquisition that a later grant of its key overtook
//     (granted before it released or noticed the loss) and that noticed
//     the loss only after the later holder's first accepted write.
func Check(h []Event) Report {
	var r Report
	acqs := map[string]*acq{}
	get := func(e Event) *acq {
		a := acqs[e.Nonce]
		if a == nil {
			a = &acq{nonce: e.Nonce, key: e.Key, end: math.MaxInt64}
			acqs[e.Nonce] = a
		}
		return a
	}
	writes := map[string]*write{} // resource + nonce + seq of entry
	var open []*write
	var all []*write
	for _, e := range h {
		switch e.Kind {
		case AcquireSent:
			get(e).sent = e.T
		case Granted:
			a := get(e)
			a.grant, a.fence, a.granted = e.T, e.Fence, true
			r.Ops++
		case ReleaseSent:
			a := get(e)
			a.end, a.released = min(a.end, e.T), e.T
		case LossNoticed:
			a := get(e)
			a.loss, a.reason = e.T, e.Reason
			a.end = min(a.end, e.T)
		case WriteRejected:
			r.StaleRejected++
		case WriteAccepted:
			r.Writes++
			w := &write{resource: e.Resource, key: e.Key, nonce: e.Nonce, fence: e.Fence, seq: e.Seq, in: e.T, out: math.MaxInt64}
			for _, o := range open {
				if o.resource == w.resource && o.key == w.key && o.nonce != w.nonce && !o.overtaken {
					o.overtaken = true
					r.Overlaps++
					told := "not told of its loss"
					switch a := acqs[o.nonce]; {
					case a != nil && a.released != 0 && a.released <= w.in:
						// Its holder had left and released, but the
						// resource never heard it leave: the run lost a
						// message, the lock did nothing wrong.
						r.Unfinished++
						told = fmt.Sprintf("released %v before without leaving the resource: a harness error", nsDuration(w.in-a.released))
					case a != nil && a.loss != 0 && a.loss <= w.in:
						told = fmt.Sprintf("told of its loss %v before (%s)", nsDuration(w.in-a.loss), a.reason)
					default:
						r.OverlapsUntold++
					}
					r.Findings = append(r.Findings, fmt.Sprintf("overlap: %s key %q: %s (fence %d) entered while %s (fence %d) was inside, %s",
						w.resource, w.key, w.nonce, w.fence, o.nonce, o.fence, told))
				}
			}
			open = append(open, w)
			all = append(all, w)
			writes[e.Resource+"\x00"+e.Nonce] = w
			if a := get(e); a.firstWrite == 0 {
				a.firstWrite = e.T
			}
		case WriteDone:
			if w := writes[e.Resource+"\x00"+e.Nonce]; w != nil {
				w.out = e.T
				for i, o := range open {
					if o == w {
						open = append(open[:i], open[i+1:]...)
						break
					}
				}
			}
		}
	}

	// Grants per key in time order.
	byKey := map[string][]*acq{}
	for _, a := range acqs {
		if a.granted {
			byKey[a.key] = append(byKey[a.key], a)
		}
	}
	for key, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].grant < gs[j].grant })
		regressed, late := map[*acq]bool{}, map[*acq]bool{}
		for j, b := range gs {
			for _, a := range gs[:j] {
				// 2: a was granted before b was asked for, so the store
				// granted b after a: its fence must be higher.
				if b.sent != 0 && a.grant < b.sent && b.fence <= a.fence && !regressed[b] {
					regressed[b] = true
					r.Regressions++
					r.Findings = append(r.Findings, fmt.Sprintf("regression: key %q: %s got fence %d after %s got %d",
						key, b.nonce, b.fence, a.nonce, a.fence))
				}
				// 4: b overtook a; a must have known before b wrote.
				if b.grant < a.end && b.firstWrite != 0 && a.end > b.firstWrite && !late[a] {
					late[a] = true
					r.LateLoss++
					when := "never"
					if a.loss != 0 {
						when = fmt.Sprintf("%v after", nsDuration(a.loss-b.firstWrite))
					}
					r.Findings = append(r.Findings, fmt.Sprintf("late loss: key %q: %s (fence %d) noticed its loss %s %s (fence %d) wrote",
						key, a.nonce, a.fence, when, b.nonce, b.fence))
				}
			}
		}
	}

	// 3: replay each resource's decisions in its own order.
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	type top struct {
		fence uint64
		nonce string
	}
	tops := map[string]top{}
	for _, w := range all {
		k := w.resource + "\x00" + w.key
		t, seen := tops[k]
		switch {
		case !seen || w.fence > t.fence:
			tops[k] = top{w.fence, w.nonce}
		case w.fence < t.fence || w.nonce != t.nonce:
			r.StaleAccepted++
			r.Findings = append(r.Findings, fmt.Sprintf("stale accepted: %s key %q: %s fence %d after %s fence %d",
				w.resource, w.key, w.nonce, w.fence, t.nonce, t.fence))
		}
	}
	return r
}

type nsDuration int64

func (d nsDuration) String() string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
