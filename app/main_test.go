package app

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: no goroutine outlives the app package's tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
