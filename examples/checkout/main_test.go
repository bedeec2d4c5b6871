package main

import "testing"

func TestOneChargePerOrder(t *testing.T) {
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		if err := run("mem://checkout-test", order); err != nil {
			t.Fatal(err)
		}
	}
}
