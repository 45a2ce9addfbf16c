package relaytest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// drainTasksDone counts the drain tasks the relay's turns queue has
// processed (asynq's own count).
func drainTasksDone(t *testing.T, r *Relay) func() int {
	t.Helper()
	insp := asynq.NewInspectorFromRedisClient(r.App.Redis()) // a real Redis or the embedded store
	q := jobs.QueuesFor(r.Redis.Prefix).Turns
	return func() int {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			return 0 // no task yet
		}
		return info.ProcessedTotal
	}
}

// drainTasksEnqueued counts the drain tasks ever enqueued on r's turn queue:
// processed, and waiting or running (asynq moves a task between these in one script).
func drainTasksEnqueued(t *testing.T, r *Relay) func() int {
	t.Helper()
	insp := asynq.NewInspectorFromRedisClient(r.App.Redis())
	q := jobs.QueuesFor(r.Redis.Prefix).Turns
	return func() int {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			return 0 // no task yet
		}
		return info.ProcessedTotal + info.Pending + info.Active + info.Scheduled + info.Retry
	}
}

// keyReads is a go-redis hook counting the reads (HGETALL, GET) of each key.
type keyReads struct {
	mu sync.Mutex
	n  map[string]int
}

func (k *keyReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (k *keyReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) == 2 && (strings.EqualFold(cmd.Name(), "hgetall") || strings.EqualFold(cmd.Name(), "get")) {
			k.mu.Lock()
			if k.n == nil {
				k.n = map[string]int{}
			}
			k.n[fmt.Sprint(args[1])]++
			k.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (k *keyReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// of is how many reads read a key ending in suffix.
func (k *keyReads) of(suffix string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for key, c := range k.n {
		if strings.HasSuffix(key, suffix) {
			n += c
		}
	}
	return n
}

// A prompt whose caller waits starts its drain in the serving process (no
// asynq hop on the reply's path); one the caller does not wait for goes
// through the queue. A drain started here that cannot run (the session's
// lease is held elsewhere) hands over to the queue, and the reply still
// comes (R7.11, R18.11).
func TestWaitedSendStartsItsDrainHere(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	done := drainTasksDone(t, r)
	orch := r.NewSession(map[string]any{"title": "orchestrator"})
	target := r.NewSession(map[string]any{"title": "target"})
	m := r.Connect(orch.Token, nil)

	// An owner message (nobody waits): a drain task.
	tid := r.Message(target.ID, Script(stepReply("queued")))
	r.WaitTurn(tid, 10*time.Second, store.TurnDone)
	Eventually(t, 10*time.Second, func() bool { return done() >= 1 }, "the owner message's drain task to be processed")
	before := done()
	enqueued := drainTasksEnqueued(t, r)
	enqBefore := enqueued()

	reads := &keyReads{}
	r.App.Redis().AddHook(reads)
	for i := range 5 {
		env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": target.ID, "text": Script(stepReply("direct")), "wait_seconds": 20})
		if got := obj(t, env["reply"], "reply")["text"]; got != "direct" {
			t.Fatalf("send %d: reply %v", i, env["reply"])
		}
		// The caller got the turn as it ended, handed over in the process:
		// it did not read the turn again.
		if n := reads.of(":turn:" + str(env["message_id"])); n != 0 {
			t.Fatalf("send %d: the waiting caller read its turn %d times, want 0", i, n)
		}
	}
	// A drain task for a send would have been enqueued before its reply (the
	// task would have run the turn); a next one, before the last drain let the
	// session's lease go.
	Eventually(t, 10*time.Second, func() bool {
		h, err := r.App.Store().LeaseHolder(context.Background(), target.ID)
		return err == nil && h == ""
	}, "the last send's drain to end")
	if n := enqueued() - enqBefore; n != 0 {
		t.Fatalf("%d drain tasks enqueued for 5 waited sends, want 0 (each drain starts where the prompt was queued)", n)
	}

	// The lease held elsewhere: the drain started here hands over to the
	// queue, whose task runs once the lease is gone.
	ctx := context.Background()
	if ok, err := r.App.Store().AcquireLease(ctx, target.ID, "elsewhere:1", 1500*time.Millisecond); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": target.ID, "text": Script(stepReply("after the lease")), "wait_seconds": 30})
	if got := obj(t, env["reply"], "reply")["text"]; got != "after the lease" {
		t.Fatalf("reply %v (%v)", env["reply"], env)
	}
	Eventually(t, 10*time.Second, func() bool { return done() > before }, "the handed-over drain task to be processed")
}

// limits.direct_starts 0: every prompt, waited or not, goes through the
// queue (agents run only where queue workers take the turn).
func TestDirectStartsOff(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{Config: func(c *config.Config) { c.Limits.DirectStarts = 0 }})
	done := drainTasksDone(t, r)
	orch := r.NewSession(map[string]any{"title": "orchestrator"})
	target := r.NewSession(map[string]any{"title": "target"})
	m := r.Connect(orch.Token, nil)
	for i := range 3 {
		env := m.MustOK(map[string]any{"action": "send", "relay": "this", "session": target.ID, "text": Script(stepReply("queued")), "wait_seconds": 20})
		if got := obj(t, env["reply"], "reply")["text"]; got != "queued" {
			t.Fatalf("send %d: reply %v", i, env["reply"])
		}
	}
	Eventually(t, 10*time.Second, func() bool { return done() >= 3 }, "a drain task for each of the 3 waited sends")
}
