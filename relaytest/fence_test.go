package relaytest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

// TestPausedWorkerWritesNothingLate (issue 20 item 8, R18.11): a `relay
// worker` process is stopped (SIGSTOP) for longer than its session lease
// while its turn runs. Another process rightly ends that turn as "the worker
// running this turn stopped" and runs the prompt queued behind it. Then the
// paused worker is woken (SIGCONT): its agent's reply is due, but every
// write of the turn is fenced by the lease it no longer holds, so nothing
// more is written: the turn keeps one outcome, the conversation stays in
// order, and the session is idle after.
func TestPausedWorkerWritesNothingLate(t *testing.T) {
	NeedsSharedRedis(t, "a serve and a `relay worker` child process on one Redis")
	if testing.Short() {
		t.Skip("builds the relay binary and pauses a worker process past its lease (~40 s)")
	}
	t.Parallel()
	bin := builtRelayBinary(t)
	rd := NewRedis(t)
	// The serve process has one worker slot; a blocker turn keeps it busy
	// while the subprocess takes the victim's turn.
	srv := Start(t, Options{Redis: rd, Concurrency: 1})
	srvID := srv.App.Relay().WorkerID()
	blocker := srv.NewSession(map[string]any{"title": "blocker"})
	cfgFile := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(cfgFile, []byte("folders: ["+rd.Dir+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bt := srv.Message(blocker.ID, Script(stepSleep(120000), stepReply("blocker")))
	srv.WaitTurn(bt, 30*time.Second, store.TurnRunning)
	w := startRelayWorker(t, bin, cfgFile, rd, srv.Config.Name)

	victim := srv.NewSession(map[string]any{"title": "victim"})
	const late = "the paused worker's late reply"
	const started = "on it. " // written as the turn's partial reply before the agent's wait
	first := srv.Message(victim.ID, Script(stepReply(started), stepSleep(4000), stepReply(late)))
	second := srv.Message(victim.ID, Script(stepReply("second reply")))
	srv.WaitTurn(first, 30*time.Second, store.TurnRunning)
	if h, err := srv.App.Store().LeaseHolder(t.Context(), victim.ID); err != nil || h == "" || strings.HasPrefix(h, srvID+":") {
		t.Fatalf("the victim's lease is %q (%v), want the subprocess's", h, err)
	}
	if st := srv.Owner("POST", "/api/v1/sessions/"+blocker.ID+"/stop", nil, nil); st != http.StatusOK {
		t.Fatalf("stop blocker: %d", st)
	}
	srv.WaitTurn(bt, 15*time.Second, store.TurnStopped)

	// Into the turn, before its reply: the agent reported its first words and waits.
	Eventually(t, 30*time.Second, func() bool { return srv.Turn(first).Partial == started }, "the victim's turn to report its partial reply")
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	// The serve process ends the abandoned turn and runs the one behind it.
	t1 := srv.WaitTurn(first, 90*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
	if t1.Status != store.TurnError || !strings.Contains(t1.Error, "worker") || !strings.Contains(t1.Error, "stopped") {
		t.Fatalf("the paused worker's turn ended %s %q %q, want an error saying its worker stopped", t1.Status, t1.Reply, t1.Error)
	}
	t2 := srv.WaitTurn(second, 30*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
	if t2.Status != store.TurnDone || t2.Reply != "second reply" {
		t.Fatalf("the prompt behind it: %s %q %q", t2.Status, t2.Reply, t2.Error)
	}
	t.Logf("turn ended as abandoned %s after the pause; the next one done", time.Since(paused).Round(100*time.Millisecond))

	// Wake the paused worker: its turn's reply is due at once. Its drain ends
	// in the fence (the log line for this turn: every write of the turn was
	// refused, and the drain writes nothing after it) — or, were the fence
	// broken, the late outcome lands; the checks below tell which.
	resume()
	fencedLine := func() bool {
		for _, l := range strings.Split(w.out.String(), "\n") {
			if strings.Contains(l, "outcome was not written") && strings.Contains(l, first[:8]) {
				return true
			}
		}
		return false
	}
	Eventually(t, 30*time.Second, func() bool {
		return fencedLine() || srv.Turn(first).Reply != ""
	}, "the woken worker's drain of the turn to end in the fence")

	got := srv.Turn(first)
	if got.Status != store.TurnError || got.Error != t1.Error || got.Reply != "" || !got.EndedAt.Equal(t1.EndedAt) {
		t.Fatalf("the turn changed after the paused worker woke: %s reply %q error %q ended %s (was %s %q %s)",
			got.Status, got.Reply, got.Error, got.EndedAt, t1.Status, t1.Error, t1.EndedAt)
	}
	var outcomes []string
	for _, m := range srv.Messages(victim.ID, "") {
		text := fmt.Sprint(m["text"])
		if m["role"] != "user" && strings.Contains(text, late) {
			t.Fatalf("the paused worker's late reply landed in the conversation: %v", m)
		}
		if m["role"] == "assistant" || (m["role"] == "event" && strings.Contains(text, "stopped")) {
			outcomes = append(outcomes, fmt.Sprint(m["role"], ": ", text))
		}
	}
	if len(outcomes) != 2 || !strings.HasPrefix(outcomes[0], "event: ") || outcomes[1] != "assistant: second reply" {
		t.Fatalf("outcomes in the conversation %q, want the first turn's error then the second reply, once each", outcomes)
	}
	if why := waitIdle(srv, victim.ID, 10*time.Second); why != "" {
		t.Fatalf("the victim is stuck: %s", why)
	}
	// The woken worker goes on serving: a new prompt is answered (by either process).
	id := srv.Message(victim.ID, "after")
	if tr := waitEnded(srv, id, 30*time.Second); tr.Status != store.TurnDone || tr.Reply != "echo: after" {
		t.Fatalf("a new prompt after the wake-up: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
}
