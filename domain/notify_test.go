package domain

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// notifyCounter counts the failed notifications; the other counts are dropped.
type notifyCounter struct{ failed atomic.Int64 }

func (*notifyCounter) ToolCall(string, string, time.Duration)     {}
func (*notifyCounter) TurnStarted(string)                         {}
func (*notifyCounter) TurnFinished(string, string, time.Duration) {}
func (*notifyCounter) CardDecided(string)                         {}
func (*notifyCounter) Event(string)                               {}
func (*notifyCounter) Delivery(string)                            {}
func (n *notifyCounter) NotifyFailed()                            { n.failed.Add(1) }

// A notification that is sent counts nothing; one that fails is logged and
// counted (relay_notify_failures_total), and the caller goes on.
func TestNotifyFailureIsLoggedAndCounted(t *testing.T) {
	t.Parallel()
	st, rdb := testStore(t)
	met := &notifyCounter{}
	var logs bytes.Buffer
	r := New(st, nil, nil, Options{Name: "desk", Metrics: met, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer r.Shutdown()
	ctx := context.Background()
	r.notify(ctx, "sessions")
	if n := met.failed.Load(); n != 0 {
		t.Fatalf("a notification sent counted %d failures", n)
	}
	_ = rdb.Close() // every command fails from here on
	r.notify(ctx, "session:s_1")
	r.notifySessions(ctx, "s_2", "s_3")
	if n := met.failed.Load(); n != 3 {
		t.Fatalf("%d failures counted, want 3", n)
	}
	if l := logs.String(); !strings.Contains(l, `level=WARN msg="notification not sent" what=session:s_1`) {
		t.Fatalf("the failure is not in the log:\n%s", l)
	}
}
