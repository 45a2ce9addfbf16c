package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/app"
	"github.com/oar/relay/config"
	"github.com/oar/relay/embedded"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// Row m: the embedded default (no Redis URL: miniredis on a loopback port of
// its own, kept in a data directory, R20) beside the real Redis, in one run
// (R20.5). Three relays of this process, each with the same configuration,
// key prefix and sessions: on the real Redis, on the embedded default
// (a checkpoint every second), and on the embedded store with checkpoints
// off (a checkpoint every 1000 h: the cost of persistence is the difference).
// Each round measures send→reply at 1 client, 32 agents (as G2) and
// list_sessions at 1,000 sessions on each relay, one after the other in an
// order that rotates from round to round. Then a fourth relay, embedded with
// checkpoints off (they are taken by hand), gets 10,000 sessions in a burst:
// its first checkpoint, the full base file's write (Compact) and the calls'
// p99 during both, next to the calls between them.

type embSizes struct {
	rounds      int // counted rounds (a warm-up round first in a full run)
	n1          int // send→reply at 1 client: calls per round
	agents      int // concurrent agents (as G2)
	targets     int // target sessions
	n2          int // round trips per agent per round
	listN       int // sessions in each relay
	listCalls   int // list_sessions calls per round and relay
	listConc    int // list_sessions concurrent clients
	bigN        int // sessions of the snapshot phase
	loadFor     time.Duration
	loadConc    int // the snapshot phase's list_sessions clients
	compactions int // timed Compacts in the snapshot phase
}

func embSizesFor(quick bool) embSizes {
	if quick {
		return embSizes{rounds: 1, n1: 10, agents: 8, targets: 10, n2: 3, listN: 200, listCalls: 80, listConc: 4,
			bigN: 1000, loadFor: 5 * time.Second, loadConc: 2, compactions: 3}
	}
	return embSizes{rounds: 5, n1: 60, agents: 32, targets: 50, n2: 40, listN: 1000, listCalls: 400, listConc: 8,
		bigN: 10000, loadFor: 20 * time.Second, loadConc: 4, compactions: 16}
}

// The relays of the rounds.
const (
	stReal = iota // the real Redis
	stEmb         // the embedded default: a checkpoint every second
	stOff         // the embedded store, checkpoints off
	nStores
)

var storeNames = [nStores]string{"real Redis", "embedded", "embedded, checkpoints off"}

// offEvery is the checkpoint interval that turns checkpoints off.
const offEvery = 1000 * time.Hour

// cpSample is one checkpoint seen while polling Stats.
type cpSample struct {
	dur            time.Duration
	records, bytes int64
}

type embResult struct {
	sz      embSizes
	dataFS  string // where the data directories are
	rounds  int
	load    string // the machine during the rounds
	client  time.Duration
	loadAvg [2]string
	// per store, per counted round
	send1 [nStores][]time.Duration // p50 at 1 client
	thr2  [nStores][]float64       // 32 agents: round trips/s
	p50s2 [nStores][]time.Duration
	rts2  [nStores][]float64 // the relay client's Redis round trips per round trip
	cpu2  [nStores][]float64 // process CPU (ms) per round trip, the round and the settle after it
	rcpu2 []float64          // redis-server CPU (ms) per round trip (the real Redis, any client)
	list  [2][]callResult    // list_sessions per round: real, embedded
	// the persistence under the 32 agents (the embedded default's rounds)
	cps     []cpSample
	cpWall  time.Duration // the rounds and their settles
	cpRTs   int           // round trips in them
	cpBytes int64
	cpRecs  int64
	largest string // the embedded default's largest keys after the rounds
	// file size per session
	n1k               int
	empty1k, size1k   int64 // data directory bytes (after Checkpoint and Compact) before the sessions and with them
	nBig              int
	emptyBig, sizeBig int64
	baseBig           int64
	burstWall         time.Duration
	first             cpSample // the first checkpoint after the burst
	firstMerge        time.Duration
	compacts          []time.Duration
	during, duringCP  dist // list_sessions during the compactions, during the first checkpoint
	without           dist // and while neither a checkpoint nor a compaction ran
	loadN             int
	loadBusy          string
}

func (b *bench) runEmbedded(ctx context.Context) (embResult, error) {
	sz := embSizesFor(b.o.quick)
	out := embResult{sz: sz, dataFS: os.TempDir()}
	out.loadAvg[0] = loadAvg()
	if err := b.embRounds(ctx, &out); err != nil {
		return out, err
	}
	if err := b.embSnapshot(ctx, &out); err != nil {
		return out, fmt.Errorf("snapshot phase: %w", err)
	}
	out.loadAvg[1] = loadAvg()
	return out, nil
}

// loadAvg is the machine's 1-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// startEmbeddedRelay starts a relay on the embedded store (no Redis URL)
// with a data directory of its own, checkpoints every every.
func startEmbeddedRelay(prefix string, concurrency int, b *bench, every time.Duration) (*relayProc, error) {
	data, err := os.MkdirTemp("", "relay-bench-data-")
	if err != nil {
		return nil, err
	}
	rp, err := startRelayApp("", prefix, concurrency, b.hc, func(c *config.Config) { c.DataDir = data },
		func(o *app.Options) { o.EmbeddedEvery = every })
	if err != nil {
		_ = os.RemoveAll(data)
		return nil, err
	}
	rp.data = data
	return rp, nil
}

// embClient is a client of its own to a relay's embedded store.
func embClient(rp *relayProc) redis.UniversalClient {
	e := rp.app.Embedded()
	return redis.NewClient(&redis.Options{Addr: e.Addr(), Password: e.Password(), PoolSize: 4})
}

// dirBytes is the size of the regular files in dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// settledBytes takes a checkpoint and merges every segment into the base
// file, then returns the data directory's size.
func settledBytes(ctx context.Context, rp *relayProc) (int64, error) {
	e := rp.app.Embedded()
	if err := e.Checkpoint(ctx); err != nil {
		return 0, err
	}
	if err := e.Compact(); err != nil {
		return 0, err
	}
	return dirBytes(rp.data)
}

type embStore struct {
	rp      *relayProc
	m       meter
	own     redis.UniversalClient // the embedded store's client of this program, else nil
	orch    []sessionRef
	targets []string
}

func (s *embStore) setup(ctx context.Context, sz embSizes) error {
	if err := s.rp.enableAgentSessions(ctx); err != nil {
		return err
	}
	if err := s.rp.createSessions(ctx, sz.listN-sz.agents-sz.targets, 16, "Filler session"); err != nil {
		return err
	}
	s.orch = make([]sessionRef, sz.agents)
	for i := range s.orch {
		var err error
		if s.orch[i], err = s.rp.createSession(ctx, fmt.Sprintf("Agent %02d", i)); err != nil {
			return err
		}
	}
	s.targets = make([]string, sz.targets)
	for i := range s.targets {
		t, err := s.rp.createSession(ctx, fmt.Sprintf("Target %02d", i))
		if err != nil {
			return err
		}
		s.targets[i] = t.ID
	}
	return nil
}

// rotated is 0..n-1 starting at r mod n.
func rotated(r, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (r + i) % n
	}
	return out
}

// pollCheckpoints records the checkpoints of e until stop is closed.
func pollCheckpoints(e *embedded.Server, stop <-chan struct{}) <-chan []cpSample {
	res := make(chan []cpSample, 1)
	go func() {
		var out []cpSample
		last := e.Stats()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				res <- out
				return
			case <-t.C:
			}
			s := e.Stats()
			if d := s.Checkpoints - last.Checkpoints; d > 0 {
				for range d {
					out = append(out, cpSample{dur: s.LastCheckpoint, records: (s.Records - last.Records) / d, bytes: (s.Bytes - last.Bytes) / d})
				}
				last = s
			}
		}
	}()
	return res
}

func (b *bench) embRounds(ctx context.Context, out *embResult) error {
	sz := out.sz
	var st [nStores]*embStore
	defer func() {
		for _, s := range st {
			if s != nil {
				if s.own != nil {
					_ = s.own.Close()
				}
				_ = s.rp.stop()
			}
		}
	}()
	for i := range st {
		var rp *relayProc
		var err error
		switch i {
		case stReal:
			rp, err = startRelay(b.o.redisURL, b.mPrefix, b.o.concurrency, b.hc)
		case stEmb:
			rp, err = startEmbeddedRelay(b.mPrefix, b.o.concurrency, b, time.Second)
		case stOff:
			rp, err = startEmbeddedRelay(b.mPrefix, b.o.concurrency, b, offEvery)
		}
		if err != nil {
			return fmt.Errorf("start the relay on the %s: %w", storeNames[i], err)
		}
		s := &embStore{rp: rp}
		st[i] = s
		if i == stReal {
			s.m = meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
		} else {
			s.own = embClient(rp)
			s.m = meter{rdb: s.own, rt: rp.rt, client: rp.app.Redis()}
		}
		b.logf("(m) %s: %d sessions (%d agents, %d targets)", storeNames[i], sz.listN, sz.agents, sz.targets)
		if i == stEmb {
			if err := rp.enableAgentSessions(ctx); err != nil {
				return err
			}
			if out.empty1k, err = settledBytes(ctx, rp); err != nil {
				return err
			}
		}
		if err := s.setup(ctx, sz); err != nil {
			return fmt.Errorf("%s: %w", storeNames[i], err)
		}
		if i == stEmb {
			if out.size1k, err = settledBytes(ctx, rp); err != nil {
				return err
			}
			out.n1k = sz.listN
		}
	}
	cl := clients{inproc: b.o.inproc, tr: b.tr}
	queue := jobs.QueuesFor(b.mPrefix).Turns
	listArgs := map[string]any{"action": "list_sessions", "relay": "this", "limit": 50}
	const settle = 1200 * time.Millisecond // a checkpoint takes the round's last writes
	warm := 1
	if b.o.quick {
		warm = 0
	}
	s0 := takeSnapshot(ctx, b.rdb, nil, nil)
	var err error
	for r := 0; r < warm+sz.rounds; r++ {
		counted := r >= warm
		tag := fmt.Sprintf("round %d/%d", r-warm+1, sz.rounds)
		if !counted {
			tag = "warm-up round (not counted)"
		}
		b.logf("(m) %s: send→reply at 1 client × %d, in the order %s", tag, sz.n1, orderNames(rotated(r, nStores)))
		for _, i := range rotated(r, nStores) {
			s := st[i]
			res, err := benchSend(ctx, cl, s.rp, s.m, queue, s.orch[:1], s.targets[:1], 2, sz.n1)
			if err != nil {
				return fmt.Errorf("%s: %w", storeNames[i], err)
			}
			out.client += res.client
			if counted {
				out.send1[i] = append(out.send1[i], res.lat.p50())
			}
		}
		b.logf("(m) %s: %d agents × %d round trips", tag, sz.agents, sz.n2)
		for _, i := range rotated(r, nStores) {
			s := st[i]
			var stop chan struct{}
			var cps <-chan []cpSample
			var e0 embedded.Stats
			if i == stEmb {
				stop = make(chan struct{})
				e0 = s.rp.app.Embedded().Stats()
				cps = pollCheckpoints(s.rp.app.Embedded(), stop)
			}
			c0, red0, t0 := cpuNow(), takeSnapshot(ctx, b.rdb, nil, nil).redisCPU, time.Now()
			res, err := benchSend(ctx, cl, s.rp, s.m, queue, s.orch, s.targets[:sz.agents], 2, sz.n2)
			if err != nil {
				if stop != nil {
					close(stop)
				}
				return fmt.Errorf("%s: %w", storeNames[i], err)
			}
			out.client += res.client
			time.Sleep(settle)
			cpu, red, wall := cpuNow()-c0, takeSnapshot(ctx, b.rdb, nil, nil).redisCPU-red0, time.Since(t0)
			if stop != nil {
				close(stop)
				got := <-cps
				if counted {
					e1 := s.rp.app.Embedded().Stats()
					out.cps = append(out.cps, got...)
					out.cpWall += wall
					out.cpRTs += res.n
					out.cpBytes += e1.Bytes - e0.Bytes
					out.cpRecs += e1.Records - e0.Records
				}
			}
			if !counted {
				continue
			}
			out.thr2[i] = append(out.thr2[i], rate(res.n, res.wall))
			out.p50s2[i] = append(out.p50s2[i], res.lat.p50())
			out.rts2[i] = append(out.rts2[i], res.cost.per(res.n).rts)
			out.cpu2[i] = append(out.cpu2[i], float64(cpu)/float64(time.Millisecond)/float64(max(1, res.n)))
			if i == stReal {
				out.rcpu2 = append(out.rcpu2, float64(red)/float64(time.Millisecond)/float64(max(1, res.n)))
			}
		}
		b.logf("(m) %s: list_sessions × %d, %d clients, real and embedded", tag, sz.listCalls, sz.listConc)
		for _, i := range rotated(r, 2) {
			s := st[i]
			res, err := runCalls(ctx, cl, s.m, s.rp.url+"/mcp", s.orch[0].Token, "relay_tool", listArgs, sz.listConc, sz.listCalls, 5)
			if err != nil {
				return fmt.Errorf("%s: %w", storeNames[i], err)
			}
			out.client += res.client
			if counted {
				out.list[i] = append(out.list[i], res)
			}
		}
	}
	out.rounds = sz.rounds
	if out.largest, err = largestKeys(ctx, st[stEmb], b.mPrefix, 4); err != nil {
		return err
	}
	out.load = takeSnapshot(ctx, b.rdb, nil, nil).sub(s0).load(out.client)
	return nil
}

// largestKeys names the n largest keys of a relay's embedded store (the
// bytes of their contents; a checkpoint writes a key whole when it changed)
// and the keys of a conversation's messages, which grow with it.
func largestKeys(ctx context.Context, s *embStore, prefix string, n int) (string, error) {
	type kv struct {
		key, typ    string
		items, size int
	}
	var all []kv
	var msgs, msgBytes, total int
	err := embedded.ScanKeys(ctx, s.own, 1000, func(ks []string) error {
		recs, _, err := embedded.ReadKeys(ctx, s.own, ks)
		if err != nil {
			return err
		}
		for _, r := range recs {
			size := len(r.Key) + len(r.Str) + 8*len(r.Scores)
			for _, it := range r.Items {
				size += len(it)
			}
			for _, e := range r.Entries {
				size += len(e.ID)
				for _, f := range e.Fields {
					size += len(f)
				}
			}
			total += size
			if strings.HasPrefix(r.Key, store.KeyBase(prefix)+"msgs:") {
				msgs++
				msgBytes += size
			}
			all = append(all, kv{strings.TrimPrefix(r.Key, prefix), r.Type, len(r.Items) + len(r.Entries), size})
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.SortFunc(all, func(a, b kv) int { return b.size - a.size })
	var parts []string
	for _, x := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("P%s (%s, %d items) %.0f KiB", x.key, x.typ, x.items, float64(x.size)/1024))
	}
	return fmt.Sprintf("%s; %d message lists (P:msgs:CONV), %.0f KiB; %.1f MiB in all (%d keys)",
		strings.Join(parts, ", "), msgs, float64(msgBytes)/1024, float64(total)/mib, len(all)), nil
}

func orderNames(ids []int) string {
	var parts []string
	for _, i := range ids {
		parts = append(parts, storeNames[i])
	}
	return strings.Join(parts, " → ")
}

// interval is a stretch of time something ran in.
type interval struct{ from, to time.Time }

// within says whether t falls in one of ivs, each widened by before and after.
func within(ivs []interval, t time.Time, before, after time.Duration) bool {
	for _, iv := range ivs {
		if !t.Before(iv.from.Add(-before)) && t.Before(iv.to.Add(after)) {
			return true
		}
	}
	return false
}

// guard keeps the calls that start this shortly before a checkpoint or a
// Compact (and may run into it), or this shortly after one, out of the calls
// "without".
const guard = 250 * time.Millisecond

// embSnapshot: a relay on the embedded store with checkpoints off gets
// bigN sessions in a burst; then, while list_sessions runs from loadConc
// clients, its first checkpoint is taken, the merge it starts is waited for,
// and Compact rewrites the full base file several times (a small write and a
// checkpoint before each, so there is a segment to merge).
func (b *bench) embSnapshot(ctx context.Context, out *embResult) error {
	sz := out.sz
	prefix := b.mPrefix
	b.logf("(m) snapshot phase: a relay on the embedded store with checkpoints off (taken here), %d sessions in a burst", sz.bigN)
	rp, err := startEmbeddedRelay(prefix, b.o.concurrency, b, offEvery)
	if err != nil {
		return err
	}
	defer func() { _ = rp.stop() }()
	own := embClient(rp)
	defer func() { _ = own.Close() }()
	e := rp.app.Embedded()
	if err := rp.enableAgentSessions(ctx); err != nil {
		return err
	}
	lister, err := rp.createSession(ctx, "Lister")
	if err != nil {
		return err
	}
	if out.emptyBig, err = settledBytes(ctx, rp); err != nil {
		return err
	}
	t := time.Now()
	if _, err := newSessions(ctx, rp.app.Relay(), sz.bigN-1, 16, func(i int) string { return fmt.Sprintf("Idle %05d", i) }); err != nil {
		return err
	}
	out.burstWall, out.nBig = time.Since(t), sz.bigN

	var (
		mu       sync.Mutex
		cps      []interval // the first checkpoint
		merges   []interval // the compactions timed
		excluded []interval // the merge the first checkpoint started, the small checkpoints
		loopErr  = make(chan error, 1)
	)
	loop := func(deadline time.Time) {
		loopErr <- func() error {
			sleep := func(d time.Duration) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
					return nil
				}
			}
			if err := sleep(time.Second); err != nil {
				return err
			}
			s0 := e.Stats()
			t0 := time.Now()
			if err := e.Checkpoint(ctx); err != nil {
				return err
			}
			t1 := time.Now()
			s1 := e.Stats()
			out.first = cpSample{dur: t1.Sub(t0), records: s1.Records - s0.Records, bytes: s1.Bytes - s0.Bytes}
			if err := e.Compact(); err != nil { // the merge the checkpoint may have started, or this one
				return err
			}
			t2 := time.Now()
			out.firstMerge = e.Stats().LastCompaction
			mu.Lock()
			cps = append(cps, interval{t0, t1})
			excluded = append(excluded, interval{t1, t2})
			mu.Unlock()
			for i := 0; i < sz.compactions; i++ {
				if err := sleep(400 * time.Millisecond); err != nil {
					return err
				}
				if time.Until(deadline) < 2*time.Second {
					break
				}
				t0 := time.Now()
				if err := own.Set(ctx, store.KeyBase(prefix)+"bench:tick", i, 0).Err(); err != nil {
					return err
				}
				if err := e.Checkpoint(ctx); err != nil {
					return err
				}
				t1 := time.Now()
				if err := sleep(200 * time.Millisecond); err != nil {
					return err
				}
				t2 := time.Now()
				if err := e.Compact(); err != nil {
					return err
				}
				t3 := time.Now()
				out.compacts = append(out.compacts, t3.Sub(t2))
				mu.Lock()
				excluded = append(excluded, interval{t0, t1})
				merges = append(merges, interval{t2, t3})
				mu.Unlock()
			}
			return nil
		}()
	}
	spec := driveSpec{Endpoint: rp.url + "/mcp", Tool: "relay_tool", Warm: 5, For: int64(sz.loadFor)}
	for range sz.loadConc {
		spec.Tokens = append(spec.Tokens, lister.Token)
		spec.Args = append(spec.Args, map[string]any{"action": "list_sessions", "relay": "this", "limit": 50})
	}
	cl := clients{inproc: b.o.inproc, tr: b.tr}
	b.logf("(m) snapshot phase: list_sessions from %d clients for %s; the first checkpoint, then %d compactions", sz.loadConc, sz.loadFor, sz.compactions)
	var s0 snapshot
	res, err := cl.run(ctx, spec, func() {
		s0 = takeSnapshot(ctx, b.rdb, nil, nil)
		go loop(time.Now().Add(sz.loadFor))
	}, func() {})
	out.loadBusy = takeSnapshot(ctx, b.rdb, nil, nil).sub(s0).load(time.Duration(res.CPUNs))
	lerr := <-loopErr
	if err == nil {
		err = res.err()
	}
	if err != nil {
		return err
	}
	if lerr != nil {
		return lerr
	}
	if len(out.compacts) == 0 {
		return fmt.Errorf("no compaction ran within the %s of calls", sz.loadFor)
	}
	var during, duringCP, without []time.Duration
	// By the call's start: a call that overlaps an interval is more likely a
	// long one, so choosing by overlap would favour long calls.
	for _, s := range res.Samples {
		a := time.Unix(0, s.T0)
		d := time.Duration(s.T1 - s.T0)
		switch {
		case within(merges, a, 0, 0):
			during = append(during, d)
		case within(cps, a, 0, 0):
			duringCP = append(duringCP, d)
		case !within(merges, a, guard, guard) && !within(cps, a, guard, guard) && !within(excluded, a, guard, guard):
			without = append(without, d)
		}
	}
	out.during, out.duringCP, out.without, out.loadN = newDist(during), newDist(duringCP), newDist(without), len(res.Samples)
	if out.sizeBig, err = settledBytes(ctx, rp); err != nil {
		return err
	}
	out.baseBig = e.Stats().BaseBytes
	return nil
}

func (b *bench) tableM(row rowFunc, m embResult) {
	sz := m.sz
	med := func(i int) time.Duration { return medianD(m.send1[i]) }
	row("m", "the embedded default beside the real Redis: setup",
		fmt.Sprintf("three relays in this process, the same config, key prefix and sessions (%d each: %d agents, %d targets, the rest created in-process): on the real Redis (%s), on the embedded default (miniredis on a loopback port, a checkpoint every 1 s into a data directory under %s), and on the embedded store with checkpoints off (every %s: the hook marking changed keys still runs); medians of %d round(s) (a warm-up round first in a full run), each measure run on the three one after the other in an order rotating by round; the embedded store's CPU is the relay process's (miniredis runs in it; the three relays share it); load average %s at the start, %s at the end; machine during the rounds: %s",
			sz.listN, sz.agents, sz.targets, b.o.redisURL, m.dataFS, offEvery, m.rounds, m.loadAvg[0], m.loadAvg[1], m.load), "", "")
	sr := ratio(float64(med(stEmb)), float64(med(stReal)))
	row("m", fmt.Sprintf("send→reply p50 at 1 client (%d calls a round), embedded ÷ real Redis", sz.n1),
		fmt.Sprintf("**%.2f×** (embedded %s, real Redis %s, checkpoints off %s; per round: embedded %s; real %s; off %s)",
			sr, fms(med(stEmb)), fms(med(stReal)), fms(med(stOff)), fmsList(m.send1[stEmb]), fmsList(m.send1[stReal]), fmsList(m.send1[stOff])),
		"≤ 2×", verdict(sr <= 2))
	thr := func(i int) float64 { return medianF(m.thr2[i]) }
	row("m", fmt.Sprintf("%d agents × %d round trips a round (as G2), round trips/s, embedded ÷ real Redis", sz.agents, sz.n2),
		fmt.Sprintf("**%.2f** (embedded **%.0f/s** p50 %s, real Redis **%.0f/s** p50 %s, checkpoints off %.0f/s p50 %s; per round: embedded %s; real %s; off %s; the relay client's Redis round trips per round trip: %.1f, %.1f, %.1f)",
			ratio(thr(stEmb), thr(stReal)), thr(stEmb), fms(medianD(m.p50s2[stEmb])), thr(stReal), fms(medianD(m.p50s2[stReal])), thr(stOff), fms(medianD(m.p50s2[stOff])),
			fltList(m.thr2[stEmb]), fltList(m.thr2[stReal]), fltList(m.thr2[stOff]), medianF(m.rts2[stEmb]), medianF(m.rts2[stReal]), medianF(m.rts2[stOff])), "", "")
	lp := func(i int, p func(callResult) time.Duration) time.Duration {
		var xs []time.Duration
		for _, c := range m.list[i] {
			xs = append(xs, p(c))
		}
		return medianD(xs)
	}
	p50 := func(c callResult) time.Duration { return c.lat.p50() }
	p99 := func(c callResult) time.Duration { return c.lat.p99() }
	lr := func(i int) float64 {
		var xs []float64
		for _, c := range m.list[i] {
			xs = append(xs, c.perSec())
		}
		return medianF(xs)
	}
	row("m", fmt.Sprintf("list_sessions (limit 50) at %d sessions, %d MCP clients, %d calls a round: p50 / p99, embedded vs real Redis", sz.listN, sz.listConc, sz.listCalls),
		fmt.Sprintf("embedded p50 **%s**, p99 **%s**, %s · real Redis p50 **%s**, p99 **%s**, %s · embedded ÷ real: p50 %.2f×, p99 %.2f×, calls/s %.2f",
			fms(lp(stEmb, p50)), fms(lp(stEmb, p99)), frate(lr(stEmb), "calls/s"), fms(lp(stReal, p50)), fms(lp(stReal, p99)), frate(lr(stReal), "calls/s"),
			ratio(float64(lp(stEmb, p50)), float64(lp(stReal, p50))), ratio(float64(lp(stEmb, p99)), float64(lp(stReal, p99))), ratio(lr(stEmb), lr(stReal))), "", "")
	// The persistence's cost under the 32 agents.
	var durs []time.Duration
	var recs, bytes []float64
	for _, c := range m.cps {
		durs = append(durs, c.dur)
		recs = append(recs, float64(c.records))
		bytes = append(bytes, float64(c.bytes))
	}
	dd := newDist(durs)
	cpuE, cpuO, cpuR, rcpu := medianF(m.cpu2[stEmb]), medianF(m.cpu2[stOff]), medianF(m.cpu2[stReal]), medianF(m.rcpu2)
	row("m", fmt.Sprintf("the persistence's cost under the %d agents: the embedded default's checkpoints over its rounds and the %s after each (polled), and process CPU per round trip over the same windows", sz.agents, "1.2 s"),
		fmt.Sprintf("%d checkpoint(s) in %.1f s · per checkpoint: p50 **%s**, max %s; %.0f records, %.0f KiB written (medians) · per round trip: %.2f records, **%.0f B** written · relay process CPU per round trip: embedded **%.2f ms**, checkpoints off **%.2f ms** (persistence %+.2f ms, %+.0f%%); real Redis: relay process %.2f ms + redis-server %.2f ms (INFO: any client of that Redis counts) = %.2f ms; per round: embedded %s, off %s · after the rounds, the largest keys of the embedded default (a checkpoint writes a key whole when it changed): %s",
			len(m.cps), m.cpWall.Seconds(), fms(dd.p50()), fms(dd.q(1)), medianF(recs), medianF(bytes)/1024,
			float64(m.cpRecs)/float64(max(1, m.cpRTs)), float64(m.cpBytes)/float64(max(1, m.cpRTs)),
			cpuE, cpuO, cpuE-cpuO, 100*(cpuE-cpuO)/cpuO, cpuR, rcpu, cpuR+rcpu, msList(m.cpu2[stEmb]), msList(m.cpu2[stOff]), m.largest), "", "")
	per := func(total, empty int64, n int) float64 { return float64(total-empty) / float64(max(1, n)) }
	row("m", "file size per session: the data directory after a checkpoint and a Compact (everything in the base file), minus the same directory before the sessions, ÷ sessions",
		fmt.Sprintf("at %d sessions **%.0f B/session** (%.2f MiB in all, %.0f KiB before the sessions) · at %d sessions **%.0f B/session** (%.2f MiB in all, %.0f KiB before); these sessions are idle: the %d of the rounds' relay also hold the agents' conversations, not counted here",
			m.n1k, per(m.size1k, m.empty1k, m.n1k), float64(m.size1k)/mib, float64(m.empty1k)/1024,
			m.nBig, per(m.sizeBig, m.emptyBig, m.nBig), float64(m.sizeBig)/mib, float64(m.emptyBig)/1024, m.n1k), "", "")
	row("m", fmt.Sprintf("the first checkpoint after %d sessions created in a burst (in-process, %s, with checkpoints off: one checkpoint holds all of them, the worst case of the default's 1 s)", m.nBig, frate(rate(m.nBig, m.burstWall), "sessions/s")),
		fmt.Sprintf("**%s**, %d records, %.1f MiB written; list_sessions p99 of the calls started during it **%s** (n=%d, max %s) vs %s away from checkpoints and compactions; then the merge of that segment into the base file: %s",
			fms(m.first.dur), m.first.records, float64(m.first.bytes)/mib, fms(m.duringCP.p99()), len(m.duringCP), fms(m.duringCP.q(1)), fms(m.without.p99()), fms(m.firstMerge)), "", "")
	cd := newDist(m.compacts)
	row("m", fmt.Sprintf("snapshot of %d sessions: Compact writes the full base file (old base + a one-key segment), %d time(s) while list_sessions runs", m.nBig, len(m.compacts)),
		fmt.Sprintf("median **%s**, max %s (%s); base file %.2f MiB", fms(medianD(m.compacts)), fms(cd.q(1)), fmsList(m.compacts), float64(m.baseBig)/mib),
		"< 1 s", verdict(cd.q(1) < time.Second))
	pr := ratio(float64(m.during.p99()), float64(m.without.p99()))
	v := verdict(pr <= 2)
	if len(m.during) < 20 || len(m.without) < 20 {
		v = fmt.Sprintf("none (n=%d during: too few calls)", len(m.during))
	}
	row("m", fmt.Sprintf("calls during the snapshot: list_sessions (limit 50) at %d sessions from %d MCP clients for %s, p99 of the calls that start during a Compact ÷ of those that start at least %s away from any Compact and checkpoint", m.nBig, sz.loadConc, sz.loadFor, guard),
		fmt.Sprintf("**%.2f×** (during p50 %s, p99 **%s**, n=%d · without p50 %s, p99 **%s**, n=%d; %d calls in all; machine: %s)",
			pr, fms(m.during.p50()), fms(m.during.p99()), len(m.during), fms(m.without.p50()), fms(m.without.p99()), len(m.without), m.loadN, m.loadBusy),
		"≤ 2×", v)
}
