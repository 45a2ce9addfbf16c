package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/oar/relay/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string, o ...func(*Options)) (*Server, *redis.Client) {
	t.Helper()
	opts := Options{Dir: dir, Every: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	for _, f := range o {
		f(&opts)
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.Password()})
	t.Cleanup(func() { _ = c.Close(); s.Kill() }) // a no-op after Close
	return s, c
}

// dump reads every key of the server as records, in key order.
func dump(t *testing.T, c *redis.Client) []*Record {
	t.Helper()
	ctx := context.Background()
	var keys []string
	if err := ScanKeys(ctx, c, 100, func(k []string) error { keys = append(keys, k...); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	recs, retry, err := ReadKeys(ctx, c, keys)
	if err != nil || len(retry) > 0 {
		t.Fatalf("ReadKeys: %v (retry %v)", err, retry)
	}
	return recs
}

// sameExpiry compares the expiries of two dumps within a second: miniredis
// counts a TTL down only when told the time moved on (every 250 ms), so each
// read of a TTL (a dump, the checkpoint that saved it) may be up to 250 ms
// behind the clock. (Rounding each to the second instead flips a value near
// the half second: 1 run in 5 failed so.)
var sameExpiry = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".ExpireAt" },
	cmp.Comparer(func(a, b int64) bool {
		if (a == 0) != (b == 0) {
			return false
		}
		return a-b <= 1000 && b-a <= 1000
	}))

// fill writes one key of every type the relay and asynq use, TTLs, a Lua
// script that writes keys it builds from ARGV (as asynq's do), and a MULTI.
func fill(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	p := c.Pipeline()
	p.Set(ctx, prefix+"str", "v\r\n\x00é", 0)
	p.Set(ctx, prefix+"ttl", "soon", time.Hour)
	p.HSet(ctx, prefix+"hash", "a", "1", "b", strings.Repeat("x", 10000))
	p.Expire(ctx, prefix+"hash", 2*time.Hour)
	p.RPush(ctx, prefix+"list", "1", "2", "3", "2")
	p.SAdd(ctx, prefix+"set", "x", "y", "z")
	p.ZAdd(ctx, prefix+"zset", redis.Z{Score: 1.5, Member: "a"}, redis.Z{Score: 1764680000123, Member: "b"}, redis.Z{Score: 0.1, Member: "c"})
	p.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "stream", MaxLen: 10, Approx: true, Values: []any{"e", "one"}})
	p.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "stream", Values: []any{"e", "two"}})
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Keys a script builds itself are not in KEYS: only the nested commands name them.
	script := `redis.call("HSET", ARGV[1] .. "built", "f", ARGV[2]) redis.call("LPUSH", ARGV[1] .. "blist", ARGV[2]) redis.call("RPOPLPUSH", ARGV[1] .. "list", ARGV[1] .. "moved") return 1`
	if err := c.Eval(ctx, script, nil, prefix, "from-lua").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, prefix+"counter")
		p.SRem(ctx, prefix+"set", "y")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// R20.1: a clean stop loses nothing, for every type and TTL.
func TestCleanStopKeepsEveryType(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir)
	fill(t, c, "p:")
	want := dump(t, c)
	if len(want) != 11 {
		t.Fatalf("filled %d keys, want 11", len(want))
	}
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	if d := cmp.Diff(want, dump(t, c2), sameExpiry); d != "" {
		t.Fatalf("after restart (-before +after):\n%s", d)
	}
	if ttl := c2.TTL(context.Background(), "p:ttl").Val(); ttl < 59*time.Minute || ttl > time.Hour {
		t.Fatalf("TTL after restart %v, want about 1h", ttl)
	}
}

// R20.1: a crash loses at most what the last checkpoint had not written;
// deletions are kept as well as writes.
func TestCrashKeepsTheLastCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour }) // checkpoints only when told
	ctx := context.Background()
	fill(t, c, "a:")
	c.Del(ctx, "a:str")
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	want := dump(t, c)
	c.Set(ctx, "late", "lost in the crash", 0)
	_ = c.Close()
	s.Kill()

	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	if d := cmp.Diff(want, dump(t, c2), sameExpiry); d != "" {
		t.Fatalf("after a crash (-last checkpoint +loaded):\n%s", d)
	}
}

// Merging segments into the base file keeps the dataset, drops deleted and
// expired keys, and removes the merged segments.
func TestCompactKeepsTheDataset(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	ctx := context.Background()
	for i := range 5 {
		fill(t, c, fmt.Sprintf("k%d:", i))
		c.Del(ctx, fmt.Sprintf("k%d:set", i))
		c.Set(ctx, fmt.Sprintf("k%d:gone", i), "x", 0)
		if err := s.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, fmt.Sprintf("k%d:gone", i))
		c.Set(ctx, fmt.Sprintf("k%d:short", i), "x", 30*time.Millisecond)
		if err := s.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The short keys expire on disk: the clock passes the latest expiry the segments hold.
	segs, _ := segments(dir)
	var last int64
	for _, seq := range segs {
		if _, err := readFile(filepath.Join(dir, segName(seq)), kindSeg, func(r *Record) error {
			if strings.HasSuffix(r.Key, ":short") {
				last = max(last, r.ExpireAt)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if last == 0 {
		t.Fatal("no segment holds a short key with its expiry")
	}
	time.Sleep(time.Until(time.UnixMilli(last + 1))) // the wait is for that instant, read off the disk
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := segments(dir); len(segs) != 0 {
		t.Fatalf("segments left after the merge: %v", segs)
	}
	var keys []string
	if _, err := readFile(filepath.Join(dir, baseName), kindBase, func(r *Record) error { keys = append(keys, r.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":gone") || strings.HasSuffix(k, ":short") || strings.HasSuffix(k, ":set") {
			t.Fatalf("base file keeps %q (deleted or expired)", k)
		}
	}
	c.Set(ctx, "after", "merge", 0)
	// The short keys may outlive their TTL in the server by up to 250 ms
	// (miniredis counts TTLs down when told the time moved on).
	notShort := func(recs []*Record) (out []*Record) {
		for _, r := range recs {
			if !strings.HasSuffix(r.Key, ":short") {
				out = append(out, r)
			}
		}
		return out
	}
	// The dump reads each key twice; a short key going between the two reads
	// asks for it again: wait until they went in the server too.
	testwait.Eventually(t, time.Second, 10*time.Millisecond, func() bool {
		return c.Exists(ctx, "k0:short", "k1:short", "k2:short", "k3:short", "k4:short").Val() == 0
	}, "the short keys did not expire in the server")
	want := notShort(dump(t, c))
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	if d := cmp.Diff(want, notShort(dump(t, c2)), sameExpiry); d != "" {
		t.Fatalf("after merge and restart (-before +after):\n%s", d)
	}
}

// R20.3: a file that cannot be read stops the start with its name and the
// defect, and is left exactly as it was.
func TestCorruptFileRefusedAndUntouched(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func([]byte) []byte
		says  string
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }, ""},
		{"truncated", func(b []byte) []byte { return b[:len(b)-7] }, ""},
		{"not ours", func([]byte) []byte { return []byte("hello world, not a data file") }, "bad magic"},
		{"empty", func([]byte) []byte { return nil }, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, file := range []string{baseName, segName(2)} {
				dir := t.TempDir()
				s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
				ctx := context.Background()
				fill(t, c, "x:")
				if err := s.Checkpoint(ctx); err != nil {
					t.Fatal(err)
				}
				if err := s.Compact(); err != nil {
					t.Fatal(err)
				}
				c.Set(ctx, "more", "data", 0)
				_ = c.Close()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, file)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				bad := tc.spoil(append([]byte(nil), b...))
				if err := os.WriteFile(path, bad, 0o600); err != nil {
					t.Fatal(err)
				}
				before, _ := os.Stat(path)

				_, err = Open(Options{Dir: dir})
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Path != path {
					t.Fatalf("%s: Open = %v, want a CorruptError naming %s", file, err, path)
				}
				if tc.says != "" && !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("%s: %q does not say %q", file, err, tc.says)
				}
				after, _ := os.ReadFile(path)
				st, _ := os.Stat(path)
				if !bytes.Equal(after, bad) || !st.ModTime().Equal(before.ModTime()) {
					t.Fatalf("%s: the start changed the corrupt file", file)
				}
				// And the directory is free again for the owner to mend it.
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				s3, c3 := open(t, dir)
				if c3.Get(ctx, "more").Val() != "data" {
					t.Fatalf("%s: mended file does not load", file)
				}
				_ = c3.Close()
				_ = s3.Close()
			}
		})
	}
}

// R20.2: one process per data directory; the refusal names the holder.
func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir)
	defer func() { _ = c.Close(); _ = s.Close() }()
	_, err := Open(Options{Dir: dir})
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() {
		t.Fatalf("second Open = %v, want a LockedError naming pid %d", err, os.Getpid())
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("message %q names neither the directory nor the process", err)
	}
}

// R20.5: pipelines and scripts of any size (the old in-memory pipe hung
// over ~4 KB).
func TestLargePipelinesAndScripts(t *testing.T) {
	s, c := open(t, t.TempDir())
	defer func() { _ = c.Close(); _ = s.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := strings.Repeat("relay ", 200_000) // 1.2 MB
	p := c.Pipeline()
	for i := range 5000 {
		p.HSet(ctx, fmt.Sprintf("s:%d", i), "title", fmt.Sprintf("session %d", i), "body", big[:1000])
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	p = c.Pipeline()
	gets := make([]*redis.MapStringStringCmd, 5000)
	for i := range gets {
		gets[i] = p.HGetAll(ctx, fmt.Sprintf("s:%d", i))
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if gets[4999].Val()["title"] != "session 4999" {
		t.Fatalf("pipeline read back %v", gets[4999].Val()["title"])
	}
	got, err := c.Eval(ctx, `redis.call("SET", KEYS[1], ARGV[1]) return string.len(redis.call("GET", KEYS[1]))`, []string{"big"}, big).Int()
	if err != nil || got != len(big) {
		t.Fatalf("script with a %d-byte argument: %v, %v", len(big), got, err)
	}
}

// Many connections writing while checkpoints run every few milliseconds:
// after a clean stop every write is there (the pending-key rule of the
// tracker: a checkpoint that reads a key before its command ran reads it
// again later).
func TestConcurrentWritesAllKept(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = 2 * time.Millisecond; o.CompactAt = 64 << 10 })
	ctx := context.Background()
	const writers, n = 8, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range n {
				k := fmt.Sprintf("w%d", w)
				switch i % 3 {
				case 0:
					c.Incr(ctx, k+":n")
				case 1:
					c.Eval(ctx, `redis.call("INCR", ARGV[1] .. ":n") redis.call("RPUSH", ARGV[1] .. ":l", ARGV[2])`, nil, k, i)
				case 2:
					_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.Incr(ctx, k+":n")
						p.HSet(ctx, k+":h", fmt.Sprint(i), i)
						return nil
					})
				}
			}
		})
	}
	wg.Wait()
	want := dump(t, c)
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Checkpoints < 2 {
		t.Fatalf("only %d checkpoints ran during the writes", s.Stats().Checkpoints)
	}
	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	got := dump(t, c2)
	if d := cmp.Diff(want, got, sameExpiry); d != "" {
		t.Fatalf("after restart (-before +after):\n%s", d)
	}
	for w := range writers {
		if v := c2.Get(ctx, fmt.Sprintf("w%d:n", w)).Val(); v != fmt.Sprint(n) {
			t.Fatalf("counter w%d = %s, want %d", w, v, n)
		}
	}
}

// The embedded store has one database: SELECT of another is refused rather
// than kept nowhere.
func TestOtherDatabasesRefused(t *testing.T) {
	s, c := open(t, t.TempDir())
	defer func() { _ = c.Close(); _ = s.Close() }()
	ctx := context.Background()
	err := c.Do(ctx, "SELECT", "3").Err()
	if err == nil || !strings.Contains(err.Error(), "one database") {
		t.Fatalf("SELECT 3 = %v, want refused", err)
	}
	if err := c.Do(ctx, "SELECT", "0").Err(); err != nil {
		t.Fatalf("SELECT 0 = %v", err)
	}
}

// An idle server writes nothing: a checkpoint of unchanged keys is skipped.
func TestIdleWritesNothing(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	defer func() { _ = c.Close(); _ = s.Close() }()
	ctx := context.Background()
	fill(t, c, "i:")
	// Twice: the commands still pending at the first (their connection sent
	// nothing since) are read once more by the second.
	for range 2 {
		if err := s.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := s.Stats().Checkpoints
	c.Get(ctx, "i:str")
	c.HGetAll(ctx, "i:hash")
	c.Set(ctx, "i:str", c.Get(ctx, "i:str").Val(), 0) // written, but the same value
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Checkpoints; got != n {
		t.Fatalf("a checkpoint of unchanged keys wrote a segment (%d → %d)", n, got)
	}
}

// What a checkpoint writes follows the change, not the key's size: an
// element appended to a long list, an entry added to a long stream (trimmed
// at its head), a field of a big hash, a member of a big set or sorted set
// are written as patches of their own size; a restart, and a merge of the
// patches into the base file, give back exactly the dataset.
func TestPatchesFollowTheChange(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	ctx := context.Background()
	big := strings.Repeat("x", 1000)
	p := c.Pipeline()
	for i := range 2000 {
		p.RPush(ctx, "msgs", fmt.Sprintf("%d:%s", i, big))
		p.XAdd(ctx, &redis.XAddArgs{Stream: "events", MaxLen: 1500, Values: []any{"e", fmt.Sprintf("%d:%s", i, big)}})
		p.HSet(ctx, "hash", fmt.Sprint("f", i), big)
		p.SAdd(ctx, "set", fmt.Sprint("m", i, big))
		p.ZAdd(ctx, "zset", redis.Z{Score: float64(i), Member: fmt.Sprint("z", i, big)})
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	_ = s.Checkpoint(ctx) // the pending commands' second read
	whole := s.Stats().Bytes
	if whole < 9_000_000 {
		t.Fatalf("the first checkpoint wrote %d bytes, want the whole dataset (over 9 MB)", whole)
	}
	for round := range 3 {
		before := s.Stats().Bytes
		p := c.Pipeline()
		p.RPush(ctx, "msgs", fmt.Sprint("new message ", round))
		p.XAdd(ctx, &redis.XAddArgs{Stream: "events", MaxLen: 1500, Values: []any{"e", fmt.Sprint("new event ", round)}})
		p.HSet(ctx, "hash", "f7", fmt.Sprint("changed ", round), "fresh", "yes")
		p.HDel(ctx, "hash", fmt.Sprint("f", 100+round))
		p.SAdd(ctx, "set", fmt.Sprint("new member ", round))
		p.SRem(ctx, "set", fmt.Sprint("m", 5+round, big))
		p.ZAdd(ctx, "zset", redis.Z{Score: -1, Member: fmt.Sprint("z", 9, big)})
		p.ZIncrBy(ctx, "zset", 0.5, fmt.Sprint("z", 10+round, big))
		p.ZRem(ctx, "zset", fmt.Sprint("z", 20+round, big))
		p.Ping(ctx) // the connection's next command: the ones before it ran
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		if d := s.Stats().Bytes - before; d > 20_000 {
			t.Fatalf("round %d: a checkpoint of small changes to big keys wrote %d bytes", round, d)
		}
	}
	want := dump(t, c)
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, c2 := open(t, dir, func(o *Options) { o.Every = time.Hour })
	if d := cmp.Diff(want, dump(t, c2)); d != "" {
		t.Fatalf("after restart (-before +after):\n%s", d)
	}
	// Merged into the base file, the patches give the same dataset.
	if err := s2.Compact(); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3, c3 := open(t, dir)
	defer func() { _ = c3.Close(); _ = s3.Close() }()
	if d := cmp.Diff(want, dump(t, c3)); d != "" {
		t.Fatalf("after merge and restart (-before +after):\n%s", d)
	}
}

// Close frees the data directory only once nothing writes to it: no merge
// runs on after it (a merge after every checkpoint here).
func TestCloseLeavesNothingRunning(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = 5 * time.Millisecond; o.CompactAt = 1 })
	ctx := context.Background()
	for i := range 200 {
		c.HSet(ctx, fmt.Sprint("k", i%20), "f", strings.Repeat("v", 5000))
	}
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		ents, _ := os.ReadDir(dir)
		var b strings.Builder
		for _, e := range ents {
			fi, _ := e.Info()
			fmt.Fprintf(&b, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
		return b.String()
	}
	before := state()
	// Nothing of the server's runs on to write later: no goroutine it started
	// (its checkpoint loop, a merge) is left, and it sets no timers. A merge
	// that Close waited for may still be returning from its deferred calls
	// (past its WaitGroup's Done): that is given a second to exit.
	left := func() string {
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "created by github.com/oar/relay/embedded.") {
				return g
			}
		}
		return ""
	}
	if !testwait.Poll(time.Second, time.Millisecond, func() bool { return left() == "" }) {
		t.Fatalf("a goroutine of the server runs after Close:\n%s", left())
	}
	if after := state(); after != before {
		t.Fatalf("the data directory changed after Close:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// A key written with a TTL that expires unseen and comes back through a
// field-level command is a new key: the expired fields stay gone, after a
// restart and after a merge.
func TestExpiredKeyComesBackNew(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	ctx := context.Background()
	c.HSet(ctx, "h", "old1", "a", "old2", "b")
	c.PExpire(ctx, "h", 100*time.Millisecond)
	c.Ping(ctx) // the connection's next command: PEXPIRE is no longer pending after the checkpoint
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// Expired: miniredis counts down every 250 ms (a second at most here).
	testwait.Eventually(t, time.Second, 10*time.Millisecond, func() bool { return c.Exists(ctx, "h").Val() == 0 }, "the hash did not expire")
	c.HSet(ctx, "h", "new", "c")
	c.Ping(ctx)
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	if got := c2.HGetAll(ctx, "h").Val(); len(got) != 1 || got["new"] != "c" {
		t.Fatalf("after restart the hash is %v, want only new=c", got)
	}
}

// A start removes the temporary files of writes a crash cut short; a
// read-only open (relay export) writes and removes nothing.
func TestLeftoversAndReadOnly(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, func(o *Options) { o.Every = time.Hour })
	ctx := context.Background()
	c.Set(ctx, "k", "v", 0)
	_ = c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, ".seg-0000000000000009.rdat123456")
	if err := os.WriteFile(torn, []byte("half a segm"), 0o600); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			fi, _ := e.Info()
			names = append(names, fmt.Sprint(e.Name(), " ", fi.Size(), " ", fi.ModTime().UnixNano()))
		}
		return names
	}
	before := list()
	ro, err := Open(Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: ro.Addr(), Password: ro.Password()})
	if v := rc.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("read-only open reads %q", v)
	}
	rc.Set(ctx, "k", "changed", 0)
	_ = rc.Close()
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after := list()
	// The lock file's PID is the one thing a read-only open writes.
	strip := func(ls []string) (out []string) {
		for _, l := range ls {
			if !strings.HasPrefix(l, lockName+" ") {
				out = append(out, l)
			}
		}
		return out
	}
	if d := cmp.Diff(strip(before), strip(after)); d != "" {
		t.Fatalf("a read-only open changed the directory (-before +after):\n%s", d)
	}
	s2, c2 := open(t, dir)
	defer func() { _ = c2.Close(); _ = s2.Close() }()
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Fatalf("the torn temporary file is still there after a start: %v", err)
	}
	if v := c2.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("after a read-only open, the data is %q", v)
	}
}

// R25.4: at rest the store runs no checkpoint (no timer of its own): after a
// write, checkpoints go on while it settles, then none comes until the next
// write, which is kept within Every as before.
func TestNoCheckpointAtRest(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	atRest(t, s)
	cps := s.Stats().Checkpoints
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return s.Stats().Checkpoints != cps },
		"the write after the rest was never checkpointed")
}

// atRest waits until the checkpoint runs stop (settle after the last write,
// at most 10 s), then fails when one runs in the next 20 Every.
func atRest(t *testing.T, s *Server) {
	t.Helper()
	var runs int64
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(settle / 2)
		r := s.Stats().Runs
		if r > 0 && r == runs {
			break
		}
		runs = r
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints still run %s after the last write (%d runs)", 10*time.Second, r)
		}
	}
	time.Sleep(20 * s.opts.Every)
	if got := s.Stats().Runs; got != runs {
		t.Fatalf("checkpoints ran %d times at rest (Every %s, nothing written)", got-runs, s.opts.Every)
	}
}

// R25.4: changes of deferred keys alone (asynq's counters after a task ran)
// wait for the next other write without waking the checkpoint loop: at rest
// it runs none, and the counter is kept with the next change.
func TestDeferredKeysRestToo(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir)
	ctx := context.Background()
	if err := c.Incr(ctx, "asynq:{relay}:processed").Err(); err != nil {
		t.Fatal(err)
	}
	atRest(t, s)
	if n := s.Stats().Checkpoints; n != 0 {
		t.Fatalf("%d checkpoints written for a counter alone", n)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if !testwait.Poll(10*time.Second, 10*time.Millisecond, func() bool { return s.Stats().Records >= 2 }) {
		t.Fatalf("the write after the rest and the counter were not checkpointed: %+v", s.Stats())
	}
}

// R25.4: the TTL clock counts down before a command once ttlEvery went by,
// and not sooner (no timer).
func TestTTLClockLazy(t *testing.T) {
	dir := t.TempDir()
	_, c := open(t, dir)
	ctx := context.Background()
	if err := c.Set(ctx, "soon", "x", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300*time.Millisecond + 2*ttlEvery)
	if n, err := c.Exists(ctx, "soon").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS soon after its TTL ran out: %d, %v; want 0", n, err)
	}
}
