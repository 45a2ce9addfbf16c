package provider

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: no goroutine outlives the provider package's tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
