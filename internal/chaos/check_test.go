package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hist builds a history from a compact script: every event gets the next
// time, and resource events the next sequence number.
func hist(events ...Event) []Event {
	for i := range events {
		events[i].T = int64(i+1) * 1e6
		if events[i].Resource != "" {
			events[i].Seq = int64(i + 1)
		}
	}
	return events
}

// holder is one acquisition that writes once and releases cleanly.
func holder(key, nonce string, fence uint64) []Event {
	return []Event{
		{Kind: AcquireSent, Key: key, Nonce: nonce},
		{Kind: Granted, Key: key, Nonce: nonce, Fence: fence},
		{Kind: WriteAccepted, Key: key, Nonce: nonce, Fence: fence, Resource: "mem"},
		{Kind: WriteDone, Key: key, Nonce: nonce, Fence: fence, Resource: "mem"},
		{Kind: ReleaseSent, Key: key, Nonce: nonce},
		{Kind: ReleaseDone, Key: key, Nonce: nonce},
	}
}

func TestCheckGoodHistory(t *testing.T) {
	var h []Event
	for i, n := range []string{"a", "b", "c"} {
		h = append(h, holder("k", n, uint64(i+1))...)
	}
	// A loser that noticed its loss before the next holder wrote.
	h = append(h,
		Event{Kind: AcquireSent, Key: "k", Nonce: "d"},
		Event{Kind: Granted, Key: "k", Nonce: "d", Fence: 4},
		Event{Kind: AcquireSent, Key: "k", Nonce: "e"},
		Event{Kind: Granted, Key: "k", Nonce: "e", Fence: 5},
		Event{Kind: LossNoticed, Key: "k", Nonce: "d"},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "e", Fence: 5, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "e", Fence: 5, Resource: "mem"},
		Event{Kind: WriteRejected, Key: "k", Nonce: "d", Fence: 4, Resource: "mem"},
	)
	r := Check(hist(h...))
	if r.Ops != 5 || r.Writes != 4 || r.StaleRejected != 1 {
		t.Errorf("counts: %+v", r)
	}
	if len(r.Findings) != 0 {
		t.Errorf("a good history has findings: %q", r.Findings)
	}
}

func TestCheckCatchesOverlap(t *testing.T) {
	r := Check(hist(
		Event{Kind: AcquireSent, Key: "k", Nonce: "a"},
		Event{Kind: Granted, Key: "k", Nonce: "a", Fence: 1},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
		Event{Kind: AcquireSent, Key: "k", Nonce: "b"},
		Event{Kind: Granted, Key: "k", Nonce: "b", Fence: 2},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: ReleaseSent, Key: "k", Nonce: "a"},
		Event{Kind: ReleaseSent, Key: "k", Nonce: "b"},
	))
	if r.Overlaps != 1 || r.OverlapsUntold != 1 {
		t.Errorf("overlaps = %d, untold %d, want 1 and 1: %+v", r.Overlaps, r.OverlapsUntold, r)
	}
	// a never noticed that b overtook it before b wrote.
	if r.LateLoss != 1 {
		t.Errorf("late loss = %d, want 1: %+v", r.LateLoss, r)
	}
}

// An overlap whose earlier holder was told of its loss before the later one
// entered (its lease ended while it finished its work) is counted apart from
// one where nobody was told, and its finding says why the lock was lost.
func TestCheckSeparatesToldOverlap(t *testing.T) {
	r := Check(hist(
		Event{Kind: AcquireSent, Key: "k", Nonce: "a"},
		Event{Kind: Granted, Key: "k", Nonce: "a", Fence: 1},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
		Event{Kind: LossNoticed, Key: "k", Nonce: "a", Reason: "lease expired"},
		Event{Kind: AcquireSent, Key: "k", Nonce: "b"},
		Event{Kind: Granted, Key: "k", Nonce: "b", Fence: 2},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: ReleaseSent, Key: "k", Nonce: "a"},
		Event{Kind: ReleaseSent, Key: "k", Nonce: "b"},
	))
	if r.Overlaps != 1 || r.OverlapsUntold != 0 || r.LateLoss != 0 {
		t.Errorf("overlaps = %d, untold %d, late loss %d; want 1, 0, 0: %+v", r.Overlaps, r.OverlapsUntold, r.LateLoss, r)
	}
	if len(r.Findings) != 1 || !strings.Contains(r.Findings[0], "told of its loss") || !strings.Contains(r.Findings[0], "lease expired") {
		t.Errorf("findings %q do not say the holder was told, and why", r.Findings)
	}
}

func TestCheckCatchesFenceRegression(t *testing.T) {
	h := append(holder("k", "a", 7), holder("k", "b", 7)...) // a store that lost its counter
	h = append(h, holder("k", "c", 3)...)
	r := Check(hist(h...))
	if r.Regressions != 2 { // b after a, c after both
		t.Errorf("regressions = %d, want 2: %q", r.Regressions, r.Findings)
	}
	// The resource took b's repeated 7 and c's 3: both stale.
	if r.StaleAccepted != 2 {
		t.Errorf("stale accepted = %d, want 2: %q", r.StaleAccepted, r.Findings)
	}
}

func TestCheckCatchesStaleWrite(t *testing.T) {
	h := holder("k", "b", 2)
	// a, granted fence 1 before b, writes after b did: a resource that
	// accepts it is not fenced.
	h = append([]Event{{Kind: AcquireSent, Key: "k", Nonce: "a"}, {Kind: Granted, Key: "k", Nonce: "a", Fence: 1}}, h...)
	h = append(h,
		Event{Kind: WriteAccepted, Key: "k", Nonce: "a", Fence: 1, Resource: "pg"}, // another resource: fine
		Event{Kind: WriteDone, Key: "k", Nonce: "a", Fence: 1, Resource: "pg"},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
	)
	r := Check(hist(h...))
	if r.StaleAccepted != 1 {
		t.Errorf("stale accepted = %d, want 1: %q", r.StaleAccepted, r.Findings)
	}
}

func TestCheckCatchesLateLossNotice(t *testing.T) {
	r := Check(hist(
		Event{Kind: AcquireSent, Key: "k", Nonce: "a"},
		Event{Kind: Granted, Key: "k", Nonce: "a", Fence: 1},
		Event{Kind: AcquireSent, Key: "k", Nonce: "b"},
		Event{Kind: Granted, Key: "k", Nonce: "b", Fence: 2},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: LossNoticed, Key: "k", Nonce: "a"}, // too late
		Event{Kind: ReleaseSent, Key: "k", Nonce: "b"},
	))
	if r.LateLoss != 1 || r.Overlaps != 0 || r.StaleAccepted != 0 || r.Regressions != 0 {
		t.Errorf("want exactly one late loss: %+v", r)
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for p := range 2 {
		var b bytes.Buffer
		rec := NewRecorder(&b, p)
		rec.Record(Event{Kind: AcquireSent, Key: "k", Nonce: "n"})
		rec.Record(Event{Kind: Granted, Key: "k", Nonce: "n", Fence: 1})
		if err := rec.Err(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "h"+string(rune('0'+p)))
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	h, err := ReadFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4 {
		t.Fatalf("read %d events, want 4", len(h))
	}
	for i := 1; i < len(h); i++ {
		if h[i].T < h[i-1].T {
			t.Fatalf("not sorted: %+v", h)
		}
	}
	if h[0].T <= 0 || h[0].T > Now() {
		t.Errorf("time %d is not CLOCK_MONOTONIC before now", h[0].T)
	}
}

// A holder whose exit from the resource was never recorded (its request
// lost at the end of the run) but that released is not an overlap of the
// lock: the checker says so and counts it apart, as an error of the run.
func TestCheckFlagsExitNeverRecorded(t *testing.T) {
	r := Check(hist(
		Event{Kind: AcquireSent, Key: "k", Nonce: "a"},
		Event{Kind: Granted, Key: "k", Nonce: "a", Fence: 1},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "a", Fence: 1, Resource: "mem"},
		Event{Kind: ReleaseSent, Key: "k", Nonce: "a"},
		Event{Kind: ReleaseDone, Key: "k", Nonce: "a"},
		Event{Kind: AcquireSent, Key: "k", Nonce: "b"},
		Event{Kind: Granted, Key: "k", Nonce: "b", Fence: 2},
		Event{Kind: WriteAccepted, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: WriteDone, Key: "k", Nonce: "b", Fence: 2, Resource: "mem"},
		Event{Kind: ReleaseSent, Key: "k", Nonce: "b"},
	))
	if r.Unfinished != 1 || r.OverlapsUntold != 0 || r.LateLoss != 0 {
		t.Errorf("unfinished = %d, untold %d, late loss %d; want 1, 0, 0: %+v", r.Unfinished, r.OverlapsUntold, r.LateLoss, r)
	}
	if len(r.Findings) != 1 || !strings.Contains(r.Findings[0], "harness error") {
		t.Errorf("findings %q do not name the harness error", r.Findings)
	}
}
