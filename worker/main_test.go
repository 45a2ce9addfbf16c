package worker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: no goroutine outlives the worker package's tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
