package domain

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: no goroutine outlives the domain package's tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
