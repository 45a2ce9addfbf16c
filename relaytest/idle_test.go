package relaytest

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/app"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/store"
)

// commandsProcessed sums the calls of INFO commandstats (Lua-internal calls
// included, as the bench's G3 counts them).
func commandsProcessed(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for _, line := range strings.Split(s, "\n") {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), "calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		x, _ := strconv.ParseInt(v, 10, 64)
		n += x
	}
	return n
}

// An idle relay (one session, no turn, nothing due) on a Redis of its own
// sends at most 10 commands a second, averaged over 15 s, with its production
// intervals (issue 36; the bench's G3): asynq's processor and forwarder wait
// on the waker's notifications, and their fallback checks, the pub/sub
// health checks and asynq's janitor are spaced out. Before: about 22/s (the
// processor's and forwarder's checks every second, each subscription's PING
// every 3 s). A count over a window, not a timing: a slow machine sends fewer.
func TestIdleRelayRedisCommands(t *testing.T) {
	NeedsSharedRedis(t, "a redis-server of its own, whose INFO commandstats only this relay moves")
	rs := startRedisServer(t)
	cfg := TestConfig(t)
	cfg.RedisURL = rs.url()
	a, err := app.New(cfg, app.Options{KeyPrefix: "idle" + store.NewID(5), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("new relay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("relay stopped with: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("relay did not stop within 30 s")
		}
	})
	select {
	case <-a.Started():
	case err := <-done:
		t.Fatalf("relay did not start: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatalf("relay did not start within 15 s")
	}
	if _, err := a.Relay().OwnerCreateSession(context.Background(), domain.NewSession{Title: "Idle"}); err != nil {
		t.Fatalf("create session: %v", err)
	}

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(rs.port)})
	defer func() { _ = c.Close() }()
	// Not a wait for a condition: the start's own work (announce, schedule
	// recovery, first checks of every set) settles in these seconds.
	time.Sleep(5 * time.Second)
	const window = 15 * time.Second
	n0 := commandsProcessed(t, c)
	t0 := time.Now()
	// Not a wait for work either: the window the idle rate is counted over.
	time.Sleep(window)
	n1 := commandsProcessed(t, c)
	el := time.Since(t0).Seconds()
	rate := float64(n1-n0-1) / el // minus this test's first INFO
	t.Logf("idle relay: %d commands in %.1f s = %.2f/s", n1-n0-1, el, rate)
	if rate > 10 {
		stats, _ := c.Info(context.Background(), "commandstats").Result()
		t.Errorf("an idle relay sent %.2f Redis commands/s over %.0f s, want at most 10\n%s", rate, el, stats)
	}
}
