package keyfeed

import (
	"slices"
	"testing"
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
