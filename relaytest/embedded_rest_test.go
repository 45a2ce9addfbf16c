package relaytest

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/internal/testwait"
)

// lastSegment is the highest segment number the data directory holds or
// merged (a merge removes segment files, its base file names the last one
// it took): each checkpoint that writes anything writes the next number.
func lastSegment(t *testing.T, dir string) uint64 {
	t.Helper()
	var last uint64
	if b, err := os.ReadFile(filepath.Join(dir, "base.rdat")); err == nil && len(b) >= 17 {
		for _, c := range b[9:17] { // header: "RELAYDB" 0x01, kind, seq (uint64 BE)
			last = last<<8 | uint64(c)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "seg-")
		if !ok || !strings.HasSuffix(n, ".rdat") {
			continue
		}
		if seq, err := strconv.ParseUint(strings.TrimSuffix(n, ".rdat"), 10, 64); err == nil {
			last = max(last, seq)
		}
	}
	return last
}

// TestEmbeddedAtRestWritesNoFile (R25.4): a real `relay serve` on the
// embedded default, left alone after a session was made and answered,
// writes no data file while nothing changes (before, asynq's heartbeat and
// the relay's process table wrote one every 5 s); a change (a new session)
// writes one, and a restart after a crash has it.
func TestEmbeddedAtRestWritesNoFile(t *testing.T) {
	if testing.Short() {
		t.Skip("a real `relay serve` process left idle for 20 s")
	}
	t.Parallel()
	folder := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	p := newEmbProc(t, "desk", embConfig(t, folder), dataDir, "", OwnerToken)
	p.start()
	s1 := p.newSession("before the rest")
	p.say(s1.ID, "one turn")

	// The turn's writes end: wait for 3 s without a new segment (a
	// checkpoint every second), for at most a minute.
	seq, since := lastSegment(t, dataDir), time.Now()
	if !testwait.Poll(time.Minute, 200*time.Millisecond, func() bool {
		if now := lastSegment(t, dataDir); now != seq {
			seq, since = now, time.Now()
		}
		return time.Since(since) >= 3*time.Second
	}) {
		t.Fatalf("the data directory did not settle after the turn: segment %d", seq)
	}

	// At rest: 20 s, four of asynq's heartbeats, one or two of the process
	// table's, the stall scan (asynq's counters) most likely once. (A
	// checkpoint that falls in the few milliseconds the stall scan's task is
	// queued does write that task: rare, and a real change of the queue.)
	const rest = 20 * time.Second
	t.Logf("at rest for %s from segment %d", rest, seq)
	time.Sleep(rest)
	if got := lastSegment(t, dataDir); got != seq {
		t.Fatalf("an idle relay wrote %d data file(s) in %s (segment %d → %d), want none", got-seq, rest, seq, got)
	}

	// A change writes a file, and a crash after it keeps the change.
	s2 := p.newSession("after the rest")
	Eventually(t, 30*time.Second, func() bool { return lastSegment(t, dataDir) > seq },
		"a data file for the new session")
	p.crash()
	p.start()
	for _, s := range []Session{s1, s2} {
		var out map[string]any
		if st := p.owner("GET", "/api/v1/sessions/"+s.ID, nil, &out); st != http.StatusOK || out["title"] != s.Title {
			t.Fatalf("after the crash and restart, session %s: %d %v", s.Title, st, out)
		}
	}
	if got := p.messages(s1.ID, "assistant"); len(got) != 1 {
		t.Fatalf("after the restart, %d replies in %s, want 1", len(got), s1.Title)
	}
}
