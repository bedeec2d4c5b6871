package faultproxy

import (
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(c net.Conn, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return 0, err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return time.Since(start), err
}

func TestFaults(t *testing.T) {
	p := Start(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, time.Second); err != nil {
		t.Fatalf("pass-through: %v", err)
	}

	p.SetLatency(50 * time.Millisecond)
	if d, err := roundTrip(c, time.Second); err != nil || d < 100*time.Millisecond {
		t.Fatalf("with 50ms each way: round trip %v, %v; want >= 100ms", d, err)
	}
	p.Restore()

	p.Blackhole()
	if _, err := roundTrip(c, 200*time.Millisecond); err == nil {
		t.Fatal("a blackholed link answered")
	}
	p.Restore()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("traffic held by the blackhole not delivered after Restore: %q, %v", buf, err)
	}

	p.Cut()
	if _, err := roundTrip(c, time.Second); err == nil {
		t.Fatal("a cut connection still worked")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		if _, err := roundTrip(c2, time.Second); err == nil {
			t.Fatal("a new connection through a cut link worked")
		}
		_ = c2.Close()
	}
	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(c3, time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}
