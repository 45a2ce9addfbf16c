package embedded

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/internal/testwait"
)

// The keys of a live process only, and asynq's counters, by name (R25.4).
func TestLiveOnlyKeys(t *testing.T) {
	for k, want := range map[string]bool{
		"asynq:servers": true, "asynq:servers:{vm:42:uuid}": true, "asynq:workers": true,
		"asynq:workers:{vm:42:uuid}": true, "asynq:schedulers": true, "asynq:schedulers:{x}": true,
		"{relay}:procs": true, "{p-1}:procs": true, "{relay}:lease:abc": true, "{relay}:lock:mirror:x": true,
		"asynq:{relay}:turns}:pending": false, "asynq:{relay}:turns}:t:x": false,
		"asynq:serversx": false, "{relay}:procsx": false, "{relay}:procs:x": false, "{relay}:lease": false,
		"{relay}:sess:abc": false, "{relay}:leases:x": false, "relay:procs": false, "{relay}:q:lease:x": false,
	} {
		if got := liveOnly(k); got != want {
			t.Errorf("liveOnly(%q) = %v, want %v", k, got, want)
		}
	}
	for k, want := range map[string]bool{
		"asynq:{relay}:events}:processed": true, "asynq:{relay}:events}:processed:2026-12-06": true,
		"asynq:{relay}:turns}:failed": true, "asynq:{q}:failed:2026-12-06": true,
		"asynq:queues":                  true,
		"asynq:{relay}:events}:pending": false, "asynq:{relay}:events}:t:processed": false, "{relay}:processed": false,
	} {
		if got := deferredKey(k); got != want {
			t.Errorf("deferredKey(%q) = %v, want %v", k, got, want)
		}
	}
}

// segmentKeys lists the keys each segment of dir holds, by segment.
func segmentKeys(t *testing.T, dir string) [][]string {
	t.Helper()
	segs, err := segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, seq := range segs {
		var keys []string
		if _, err := readFile(filepath.Join(dir, segName(seq)), kindSeg, func(r *Record) error {
			keys = append(keys, r.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		out = append(out, keys)
	}
	return out
}

// R25.4: the heartbeats and leases of a live process are in no checkpoint
// (a change to them alone writes no file), everything else is; asynq's
// counters and queue names alone write no file either, but go with the next change and the
// last checkpoint of a clean stop; after a restart the dataset is all but
// the live-only keys.
func TestLiveOnlyKeysNotKept(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	ctx := context.Background()
	live := func(beat int) {
		t.Helper()
		p := c.Pipeline()
		p.ZAdd(ctx, "asynq:servers", redis.Z{Score: float64(beat), Member: "asynq:servers:{vm:1:u}"})
		p.Set(ctx, "asynq:servers:{vm:1:u}", fmt.Sprint("info", beat), 10*time.Second)
		p.ZAdd(ctx, "asynq:workers", redis.Z{Score: float64(beat), Member: "asynq:workers:{vm:1:u}"})
		p.HSet(ctx, "asynq:workers:{vm:1:u}", "task", fmt.Sprint(beat))
		p.HSet(ctx, "{relay}:procs", "w1", fmt.Sprint(`{"seen":`, beat, `}`))
		p.Set(ctx, "{relay}:lease:s1", fmt.Sprint("owner", beat), 15*time.Second)
		p.Set(ctx, "{relay}:lock:mirror:x", "1", 15*time.Second)
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func() {
		t.Helper()
		// Twice: the second reads again the commands still pending at the first.
		for range 2 {
			if err := s.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(t, c, "k:")
	c.HSet(ctx, "{relay}:sess:s1", "title", "kept")
	c.Incr(ctx, "asynq:{relay}:events}:processed")
	live(1)
	checkpoint()
	for _, keys := range segmentKeys(t, dir) {
		for _, k := range keys {
			if liveOnly(k) {
				t.Errorf("a segment holds the live-only key %q", k)
			}
		}
	}
	kept := slices.Concat(segmentKeys(t, dir)...)
	for _, k := range []string{"{relay}:sess:s1", "k:str", "k:hash", "k:list", "asynq:{relay}:events}:processed"} {
		if !slices.Contains(kept, k) {
			t.Errorf("no segment holds %q: %v", k, kept)
		}
	}
	n := s.Stats().Checkpoints
	// At rest: heartbeats and counters change, nothing else.
	for beat := 2; beat < 5; beat++ {
		live(beat)
		c.Incr(ctx, "asynq:{relay}:events}:processed")
		c.SAdd(ctx, "asynq:queues", "relay}:events")        // each process names its queues again
		c.LPush(ctx, "asynq:{relay}:events}:pending", "t1") // a task queued and taken between two checkpoints
		c.LRem(ctx, "asynq:{relay}:events}:pending", 1, "t1")
		checkpoint()
	}
	if got := s.Stats().Checkpoints; got != n {
		t.Fatalf("heartbeats and counters alone wrote %d segment(s): %v", got-n, segmentKeys(t, dir))
	}
	// A change of the relay's own keys writes them, the counters with them.
	c.HSet(ctx, "{relay}:sess:s1", "title", "changed")
	checkpoint()
	if got := s.Stats().Checkpoints; got != n+1 {
		t.Fatalf("a change wrote %d segment(s), want 1", got-n)
	}
	all := segmentKeys(t, dir)
	last := all[len(all)-1]
	sort.Strings(last)
	if want := []string{"asynq:queues", "asynq:{relay}:events}:processed", "{relay}:sess:s1"}; !slices.Equal(last, want) {
		t.Fatalf("the change's segment holds %v, want %v", last, want)
	}
	// Counters changed alone are written by the last checkpoint of a clean stop.
	c.Incr(ctx, "asynq:{relay}:events}:processed")
	live(5)
	want := dump(t, c)
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	var wantKept []*Record
	for _, r := range want {
		if !liveOnly(r.Key) {
			wantKept = append(wantKept, r)
		}
	}
	if d := cmp.Diff(wantKept, dump(t, c2), sameExpiry); d != "" {
		t.Fatalf("after a restart, all but the live-only keys (-want +got):\n%s", d)
	}
	if v := c2.Get(ctx, "asynq:{relay}:events}:processed").Val(); v != "5" {
		t.Fatalf("processed counter after a clean stop = %q, want 5", v)
	}
}

// R25.4: more than 64 segment files start a merge, however small they are.
func TestManySmallSegmentsMerged(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	ctx := context.Background()
	for i := range 70 {
		c.Set(ctx, fmt.Sprintf("k%d", i), "v", 0)
		if err := s.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The merge runs in the background: wait for it (Close waits for it too).
	if !testwait.Poll(30*time.Second, 20*time.Millisecond, func() bool { return s.Stats().Compactions != 0 }) {
		segs, _ := segments(dir)
		t.Fatalf("no merge with %d segment files of %d bytes", len(segs), s.Stats().SegmentBytes)
	}
	s.compactWG.Wait()
	if segs, _ := segments(dir); len(segs) > maxSegments {
		t.Fatalf("%d segment files after the merge", len(segs))
	}
	want := dump(t, c)
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	if got := dump(t, c2); len(got) != len(want) || len(got) != 70 {
		t.Fatalf("after the merge and a restart %d keys, want %d", len(got), len(want))
	}
}

// R25.4: a key with a TTL that a pending command keeps marked (its
// connection sent nothing since) is not written again at every checkpoint:
// each read of its expiry (now + PTTL) differs by a few milliseconds.
func TestUnchangedExpiryNotRewritten(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	defer func() { _ = c.Close(); _ = s.Close() }()
	ctx := context.Background()
	if err := c.Set(ctx, "{relay}:tok:x", "session", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	n := s.Stats().Checkpoints
	for range 3 {
		time.Sleep(5 * time.Millisecond) // the next read's now is a later millisecond
		if err := s.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Stats().Checkpoints; got != n {
		t.Fatalf("an unchanged key with a TTL was written %d more time(s): %v", got-n, segmentKeys(t, dir))
	}
	// Its expiry set again (an hour from now, later than a second) is written.
	time.Sleep(1500 * time.Millisecond) // more than a second and the 250 ms a read of PTTL may lag
	c.Expire(ctx, "{relay}:tok:x", time.Hour)
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Checkpoints; got != n+1 {
		t.Fatalf("a new expiry wrote %d segment(s), want 1", got-n)
	}
}
