package natslock

import "sync"

// holds remembers, for the keys this backend granted or renewed, the
// revision it wrote last, so that a renewal or a release is one
// conditional write rather than a read and a write. It is only a hint: a
// write on a revision that is no longer the key's is refused, and the
// caller reads the key and tries again.
type holds struct {
	mu sync.Mutex
	m  map[string]hold
}

// hold is what a backend last wrote of a key: token's hold, or, with no
// token, the marker of a release, on which the next grant is conditional.
type hold struct {
	token string
	rev   uint64
	rec   record // the value written, with the grant's fence
}

// maxHolds bounds the hints kept: past it they are dropped, all at once,
// as a cache of locks never released would otherwise grow without end.
const maxHolds = 1 << 14

// get returns the hint of key if token wrote it.
func (h *holds) get(key, token string) (hold, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[key]
	return v, ok && v.token == token
}

// marker returns the revision of the marker this backend last wrote of
// key, or 0.
func (h *holds) marker(key string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.m[key]; ok && v.token == "" {
		return v.rev
	}
	return 0
}

// put records that token wrote rec at revision rev of key.
func (h *holds) put(key string, v hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHolds {
		h.m = make(map[string]hold)
	}
	h.m[key] = v
}

// forget drops the hint of key if token wrote it.
func (h *holds) forget(key, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.m[key]; ok && v.token == token {
		delete(h.m, key)
	}
}
