package driver_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

func TestEnded(t *testing.T) {
	if driver.Ended(context.Background()) {
		t.Error("a context without a deadline ended")
	}
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if driver.Ended(live) {
		t.Error("a context an hour from its deadline ended")
	}
	cancel()
	if !driver.Ended(live) {
		t.Error("a cancelled context has not ended")
	}
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPast()
	if !driver.Ended(past) {
		t.Error("a context past its deadline has not ended")
	}
}
