package keyfeed

import (
	"slices"
	"testing"
	"time"
)

func TestFeed(t *testing.T) {
	out := make(chan<- []string)
	f := New(3)
	if ch, _ := f.Next(out); ch != nil {
		t.Fatal("an empty feed has something to send")
	}
	f.Add("a")
	f.Add("b")
	f.Add("a")
	ch, batch := f.Next(out)
	if slices.Sort(batch); ch == nil || !slices.Equal(batch, []string{"a", "b"}) {
		t.Fatalf("batch %q, want each key once", batch)
	}
	f.Sent()
	if ch, _ := f.Next(out); ch != nil {
		t.Fatal("a sent batch is sent again")
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		f.Add(k)
	}
	if ch, batch := f.Next(out); ch == nil || batch != nil {
		t.Fatalf("past the bound: %q, want an empty batch", batch)
	}
	f.Add("e") // covered by the empty batch
	if ch, batch := f.Next(out); ch == nil || batch != nil {
		t.Fatalf("after the bound: %q, want an empty batch still", batch)
	}
	f.Sent()
	f.Add("f")
	f.Lost()
	if ch, batch := f.Next(out); ch == nil || batch != nil {
		t.Fatalf("after Lost: %q, want an empty batch", batch)
	}
}

func TestNextRetry(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 8; {
		d = NextRetry(d)
		got = append(got, d)
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("pauses %v, want %v", got, want)
	}
}
