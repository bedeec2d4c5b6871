package testserver

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redisClock returns how far the clock of the Redis server at addr (TIME)
// is ahead of this process's.
func redisClock(t *testing.T, addr string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := time.Now()
	reply, err := RedisCommand(ctx, addr, "TIME")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	f := strings.Split(reply, "\n")
	sec, err1 := strconv.ParseInt(f[0], 10, 64)
	usec, err2 := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err1 != nil || err2 != nil || len(f) != 2 {
		t.Fatalf("TIME answered %q", reply)
	}
	return time.Unix(sec, usec*1000).Sub(before.Add(after.Sub(before) / 2))
}

// near fails unless got is within 300ms of want.
func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -300*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

func TestFakeClockRedis(t *testing.T) {
	clock := NewFakeClock(t)
	s := Redis(clock.On(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	near(t, "clock at start", redisClock(t, s.Addr()), 0)

	if _, err := RedisCommand(ctx, s.Addr(), "SET", "k", "v", "PX", "3000"); err != nil {
		t.Fatal(err)
	}
	if err := clock.Set(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	near(t, "clock after a step of 2s", redisClock(t, s.Addr()), 2*time.Second)
	ttl, err := RedisCommand(ctx, s.Addr(), "PTTL", "k")
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi(ttl); ms <= 0 || ms > 1000 {
		t.Errorf("a key set to live 3s lives %sms after the clock stepped 2s: key expiry is not on the faked clock", ttl)
	}
	if err := clock.Set(-5 * time.Second); err != nil {
		t.Fatal(err)
	}
	near(t, "clock stepped back to 5s behind", redisClock(t, s.Addr()), -5*time.Second)

	s.Kill()
	s.Start()
	near(t, "clock after a restart", redisClock(t, s.Addr()), -5*time.Second)

	if err := clock.Set(0); err != nil {
		t.Fatal(err)
	}
	if err := clock.SetRate(3); err != nil {
		t.Fatal(err)
	}
	start := redisClock(t, s.Addr())
	time.Sleep(time.Second)
	near(t, "gain in 1s at 3 times the rate", redisClock(t, s.Addr())-start, 2*time.Second)
}

func TestFakeClockRefusesFractions(t *testing.T) {
	if err := (&FakeClock{}).Set(1500 * time.Millisecond); err == nil {
		t.Error("Set(1.5s) did not fail")
	}
	if err := (&FakeClock{}).SetRate(0); err == nil {
		t.Error("SetRate(0) did not fail")
	}
}

func TestFakeClockMariaDB(t *testing.T) {
	clock := NewFakeClock(t)
	s := MariaDB(clock.On(t))
	client := lookBinary(t, "mariadb-client", "mariadb")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clock.Set(100 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The time of the statement, which UTC_TIMESTAMP(6) and NOW(6) give too.
	out, err := run(ctx, client, "--no-defaults", "-uroot", "-h", Host, "-P", strconv.Itoa(s.Port), "-N", "-e", "SELECT UNIX_TIMESTAMP(NOW(6))")
	if err != nil {
		t.Fatal(err)
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		t.Fatalf("UNIX_TIMESTAMP answered %q", out)
	}
	near(t, "MariaDB's clock after a step of 100s", time.Until(time.Unix(0, int64(secs*1e9))), 100*time.Second)
}

func TestFakeClockDynalite(t *testing.T) {
	clock := NewFakeClock(t)
	s := Dynalite(clock.On(t))
	if err := clock.Set(-100 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Node.js's HTTP server dates each response by its clock (Date.now),
	// which it reads once a second: the date of the readiness check may
	// still be cached.
	time.Sleep(1100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, DynamoEndpoint(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		t.Fatalf("Date header %q: %v", resp.Header.Get("Date"), err)
	}
	// The header has whole seconds.
	if d := time.Until(date); d < -102*time.Second || d > -98*time.Second {
		t.Errorf("dynalite's clock after a step of -100s is %v from ours", d)
	}
}
