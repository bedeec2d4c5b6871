package policy

import (
	"math"
	"sync"
	"time"
)

// window is a sliding window of latencies: a ring of time slots, each a
// histogram with logarithmic buckets four to a doubling, so that a quantile
// is known to within 19% (rounded up) at any latency from 100µs to 90s.
type window struct {
	slot time.Duration

	mu    sync.Mutex
	slots [windowSlots]slot
}

const (
	windowSlots = 10
	bucketBase  = 100 * time.Microsecond
	bucketsPer2 = 4 // buckets per doubling
	buckets     = 80
)

type slot struct {
	epoch  int64 // time / slot length of the counts, 0 when never used
	counts [buckets]uint32
}

func newWindow(length time.Duration) *window {
	return &window{slot: max(length/windowSlots, time.Millisecond)}
}

// bucket returns the index of the bucket holding d.
func bucket(d time.Duration) int {
	if d <= bucketBase {
		return 0
	}
	i := int(math.Ceil(bucketsPer2 * math.Log2(float64(d)/float64(bucketBase))))
	return min(i, buckets-1)
}

// bound returns the upper bound of bucket i.
func bound(i int) time.Duration {
	return time.Duration(float64(bucketBase) * math.Exp2(float64(i)/bucketsPer2))
}

// add records latency d observed at now.
func (w *window) add(now time.Time, d time.Duration) {
	epoch := now.UnixNano() / int64(w.slot)
	w.mu.Lock()
	s := &w.slots[epoch%windowSlots]
	if s.epoch != epoch {
		*s = slot{epoch: epoch}
	}
	s.counts[bucket(d)]++
	w.mu.Unlock()
}

// quantile returns the q-quantile of the latencies within the window at now
// and how many there are; 0 when there are none.
func (w *window) quantile(now time.Time, q float64) (time.Duration, int) {
	epoch := now.UnixNano() / int64(w.slot)
	var sum [buckets]uint64
	var n uint64
	w.mu.Lock()
	for i := range w.slots {
		s := &w.slots[i]
		if s.epoch <= epoch-windowSlots || s.epoch > epoch {
			continue // outside the window
		}
		for b, c := range s.counts {
			sum[b] += uint64(c)
			n += uint64(c)
		}
	}
	w.mu.Unlock()
	if n == 0 {
		return 0, 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for b, c := range sum {
		seen += c
		if seen >= rank {
			return bound(b), int(n)
		}
	}
	return bound(buckets - 1), int(n)
}
