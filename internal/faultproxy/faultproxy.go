// Package faultproxy is a TCP proxy on loopback for fault tests: put it
// between a client and a real server, then slow, blackhole or cut the link.
//
// It is written here rather than taken from Toxiproxy because tests need only
// three faults and an in-process, dependency-free proxy whose state changes
// take effect synchronously.
package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

type mode uint8

const (
	pass      mode = iota
	blackhole      // accept and hold traffic, deliver nothing
	cut            // close every connection and refuse new ones
)

// Proxy forwards TCP connections from Addr to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    mode
	latency time.Duration
	changed chan struct{} // closed and replaced on every state change
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// Start starts a proxy to target on a free loopback port; it stops when the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address clients should dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of data in each direction by d.
func (p *Proxy) SetLatency(d time.Duration) { p.set(func() { p.latency = d }) }

// Blackhole keeps connections open but delivers nothing, as a network
// partition does; traffic held meanwhile is delivered after Restore, as TCP
// retransmission would.
func (p *Proxy) Blackhole() { p.set(func() { p.mode = blackhole }) }

// Cut closes every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.set(func() {
		p.mode = cut
		for c := range p.conns {
			_ = c.Close()
		}
	})
}

// Restore ends a blackhole or cut and removes latency.
func (p *Proxy) Restore() { p.set(func() { p.mode, p.latency = pass, 0 }) }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *Proxy) state() (mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if m, _, _ := p.state(); m == cut {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == cut {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// pipe copies src to dst chunk by chunk, applying the current fault.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer p.untrack(src)
	defer p.untrack(dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.deliver(dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// deliver writes b to dst once the link lets it through; false ends the pipe.
func (p *Proxy) deliver(dst net.Conn, b []byte) bool {
	for {
		m, latency, changed := p.state()
		switch m {
		case cut:
			return false
		case blackhole:
			<-changed
			continue
		}
		if latency > 0 {
			select {
			case <-time.After(latency):
			case <-changed:
				continue // re-evaluate: the link may have been cut meanwhile
			}
		}
		_, err := dst.Write(b)
		return err == nil
	}
}
