package relaytest

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine of a relay outlives the tests: every
// relay a test starts is stopped by its cleanup, and a stopped relay joins
// everything it started (hub listener, cache watcher, embedded-Redis clock,
// lease renewers, workers).
func TestMain(m *testing.M) {
	code := m.Run()
	// The tests' own HTTP keep-alive connections are not the relay's.
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
