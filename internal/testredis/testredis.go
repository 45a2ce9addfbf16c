// Package testredis is the tests' one Redis fixture, shared by the store's
// and the domain's tests and by relaytest: which Redis a test runs on and
// how it is reached.
//
//   - RELAY_TEST_STORE=embedded: the embedded default (R20.6), whatever else
//     is set;
//   - else REDIS_URL when set: it must answer (the test fails, never skips,
//     when it does not);
//   - else a server in the test's own process (miniredis or the embedded
//     server, the suite's choice); with CI=true that fails instead: CI runs
//     against a real Redis.
//
// Each test keeps to a key prefix (or a server) of its own and removes its
// own keys when it ends: never FLUSHALL, the Redis may be shared. It imports
// nothing of the relay but the embedded server and redisurl, so the store's
// own tests can use it.
package testredis

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/embedded"
	"github.com/oar/relay/redisurl"
)

// StoreEnv is the environment variable that picks the tests' store:
// "embedded" runs every test on the embedded default (R20.6).
const StoreEnv = "RELAY_TEST_STORE"

// Kind is the Redis a test runs on.
type Kind int

const (
	// Real is REDIS_URL's Redis.
	Real Kind = iota
	// Local is a server of the test's own process (no REDIS_URL, not in CI).
	Local
	// Embedded is the embedded default (RELAY_TEST_STORE=embedded).
	Embedded
)

// EmbeddedMode says whether the tests run on the embedded default
// (RELAY_TEST_STORE=embedded).
func EmbeddedMode() bool { return os.Getenv(StoreEnv) == "embedded" }

// Pick says which Redis the test runs on and, for Real, its URL. Without
// REDIS_URL and with CI=true it fails the test: "the <suite> must run against
// a real Redis in CI".
func Pick(tb testing.TB, suite string) (Kind, string) {
	tb.Helper()
	if EmbeddedMode() {
		return Embedded, ""
	}
	url := os.Getenv("REDIS_URL")
	if url != "" {
		return Real, url
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("CI=true but REDIS_URL is not set: the %s must run against a real Redis in CI", suite)
	}
	return Local, ""
}

// Dial is a client of the Redis at url, which must answer within 3 s (else
// the test fails). When the test ends clean runs (when not nil; it removes
// the test's own keys) with 10 s to do it, then the client closes.
func Dial(tb testing.TB, url string, clean func(ctx context.Context, c redis.UniversalClient)) redis.UniversalClient {
	tb.Helper()
	ru, err := redisurl.Parse(url)
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	c := ru.NewClient()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		tb.Fatalf("REDIS_URL %s does not answer (%v): start Redis or unset REDIS_URL to use the embedded server", url, err)
	}
	tb.Cleanup(func() {
		if clean != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			clean(ctx, c)
		}
		_ = c.Close()
	})
	return c
}

// OpenEmbedded starts the embedded server (the relay's default store) in a
// data directory of the test's own and returns a client of it; both close
// when the test ends.
func OpenEmbedded(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	srv, err := embedded.Open(embedded.Options{Dir: tb.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatalf("embedded server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: srv.Password()})
	tb.Cleanup(func() {
		_ = c.Close()
		_ = srv.Close()
	})
	return c
}
