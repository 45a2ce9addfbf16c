package storelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/store"
)

func netRefused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
}

// refused is a store failure as the store's client marks it.
func refused() error {
	return fmt.Errorf("list sessions: %w", store.MarkUnreachable(netRefused()))
}

// R25.3: each distinct failure at ERROR once, then at most once a minute
// with a count, other lines untouched, "store reachable again" at the end.
func TestHandlerRateLimitsStoreFailures(t *testing.T) {
	var buf bytes.Buffer
	h := New(slog.NewTextHandler(&buf, nil))
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	h.s.now = func() time.Time { return now }
	log := slog.New(h).With("component", "x")
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }

	for i := 0; i < 50; i++ {
		log.Warn("scheduled work failed", "loop", "drain-sweep", "err", refused())
		// The queue library's text, with a port that changes.
		log.Error(fmt.Sprintf("Dequeue error: UNKNOWN: redis eval error: read tcp 127.0.0.1:%d->127.0.0.1:6390: connect: connection refused", 40000+i), "component", "asynq")
		log.Info("turn started", "session", "abcd1234")
		log.Error("not a store failure", "err", errors.New("boom"))
		// A paired relay that does not answer is not the store.
		log.Warn("paired relay offline", "relay", "bravo", "err", fmt.Errorf("call bravo: %w", netRefused()))
		log.Warn("poll of paired relay failed: dial tcp 10.0.0.2:7420: connect: connection refused")
		now = now.Add(time.Second)
	}
	got := lines()
	count := func(frag string) int {
		n := 0
		for _, l := range got {
			if strings.Contains(l, frag) {
				n++
			}
		}
		return n
	}
	if n := count(`msg="scheduled work failed"`); n != 1 {
		t.Errorf("%d lines of a failure within a minute, want 1:\n%s", n, buf.String())
	}
	if n := count(`msg="Dequeue error`); n != 1 {
		t.Errorf("%d lines of the queue library's failure within a minute, want 1:\n%s", n, buf.String())
	}
	if n := count(`level=ERROR msg="scheduled work failed" component=x loop=drain-sweep`); n != 1 || count(`store="does not answer (connection refused)"`) != 2 {
		t.Errorf("the first line is not at ERROR with the cause:\n%s", buf.String())
	}
	if count(`msg="turn started"`) != 50 || count(`msg="not a store failure"`) != 50 ||
		count(`level=WARN msg="paired relay offline"`) != 50 || count(`level=WARN msg="poll of paired relay failed`) != 50 {
		t.Errorf("other lines were held back:\n%s", buf.String())
	}
	if !h.Down() {
		t.Fatal("no outage after store failures")
	}
	buf.Reset()
	now = now.Add(time.Minute)
	log.Warn("scheduled work failed", "loop", "drain-sweep", "err", refused())
	if got = lines(); len(got) != 1 || !strings.Contains(got[0], "level=ERROR") || !strings.Contains(got[0], "repeated=49") {
		t.Errorf("a minute later, want one ERROR line with repeated=49:\n%s", buf.String())
	}
	buf.Reset()
	h.Reachable(context.Background())
	if got = lines(); len(got) != 1 || !strings.Contains(got[0], `level=INFO msg="store reachable again"`) || !strings.Contains(got[0], "lines_left_out=98") {
		t.Errorf("the end of the outage:\n%s", buf.String())
	}
	if h.Down() {
		t.Fatal("still down after Reachable")
	}
	buf.Reset()
	h.Reachable(context.Background()) // nothing to end
	log.Warn("scheduled work failed", "loop", "drain-sweep", "err", refused())
	if got = lines(); len(got) != 1 || !strings.Contains(got[0], "level=ERROR") || strings.Contains(got[0], "repeated") {
		t.Errorf("a new outage logs its first failure again:\n%s", buf.String())
	}
}

// Watch probes only during an outage and ends it when the probe answers.
func TestWatchEndsTheOutage(t *testing.T) {
	var buf syncBuf
	h := New(slog.NewTextHandler(&buf, nil))
	var pings, fail atomic.Int32
	fail.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Watch(ctx, 5*time.Millisecond, func(context.Context) error {
			pings.Add(1)
			if fail.Load() == 1 {
				return syscall.ECONNREFUSED
			}
			return nil
		})
	}()
	slog.New(h).Error("x failed", "err", refused())
	deadline := time.Now().Add(20 * time.Second)
	testwait.Poll(time.Until(deadline), 5*time.Millisecond, func() bool { return pings.Load() >= 3 })
	if !h.Down() || strings.Contains(buf.String(), "reachable") {
		t.Fatalf("ended while the probe fails:\n%s", buf.String())
	}
	fail.Store(0)
	testwait.Poll(time.Until(deadline), 5*time.Millisecond, func() bool { return !h.Down() })
	if !strings.Contains(buf.String(), `msg="store reachable again"`) {
		t.Fatalf("no end line:\n%s", buf.String())
	}
	// Between outages Watch waits for the next one (no ticks); the next one
	// is probed and ended too.
	slog.New(h).Error("y failed", "err", refused())
	testwait.Poll(time.Until(deadline), 5*time.Millisecond, func() bool { return !h.Down() })
	cancel()
	<-done
	if n := strings.Count(buf.String(), `msg="store reachable again"`); n != 2 {
		t.Fatalf("%d end lines after two outages, want 2:\n%s", n, buf.String())
	}
}

type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.buf.String() }
