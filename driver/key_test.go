package driver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distlock/distlock/driver"
)

func TestValidateKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"order:42":                              true,
		"ключ/日本":                               true,
		strings.Repeat("k", driver.MaxKeyLen):   true,
		"":                                      false,
		strings.Repeat("k", driver.MaxKeyLen+1): false,
		"bad\xffutf8":                           false,
		"tab\there":                             false,
		"del\x7f":                               false,
		"c1\u0085":                              false,
	} {
		err := driver.ValidateKey(key)
		if ok != (err == nil) {
			t.Errorf("ValidateKey(%q) = %v, want ok %v", key, err, ok)
		}
		if err != nil && !errors.Is(err, driver.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}
