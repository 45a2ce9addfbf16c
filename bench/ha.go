package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

// Row k: the relay on a Redis Cluster (-cluster URL), and on a Sentinel set
// when -sentinel URL is given, beside the single Redis of -redis. Each gets a
// relay of its own in this process (the same config, a key prefix of its own:
// on the cluster that is the hash tag of all the relay's keys), 32 agents and
// 32 targets; each round measures send→reply at 1 client (as G1) and 32
// agents × round trips (as G2) on every store, one after the other in an
// order rotating by round; medians over rounds, ratios to the single Redis.

type haSizes struct {
	agents, n1, n2, rounds int
	warm                   bool // one round first that is not counted
}

func haSizesFor(quick bool) haSizes {
	if quick {
		return haSizes{agents: 32, n1: 20, n2: 10, rounds: 2}
	}
	// Many short rounds: on a shared machine the load drifts within a
	// minute; each round's stores run back to back, so a round's ratio
	// compares like with like (the per-round ratios' median is reported too).
	return haSizes{agents: 32, n1: 30, n2: 20, rounds: 9, warm: true}
}

// haStore is one of row k's stores.
type haStore struct {
	name, url string
	prefix    string
	own       redis.UniversalClient // this program's client of it (INFO, cleanup)
	rp        *relayProc
	orch      []sessionRef
	targets   []string
	send1     []time.Duration // per round: p50 at 1 client
	thr32     []float64       // per round: round trips/s at 32 agents
	p50s32    []time.Duration // per round: p50 at 32 agents
	rts32     []float64       // per round: the relay client's Redis round trips per round trip
	rcpu32    []float64       // per round: Redis CPU (ms) per round trip, every node of the store
	nodes     int             // how many redis-server processes that CPU is summed over
}

// storeCPU is the CPU (user + system) of every redis-server of a store this
// program can reach: every node of a cluster (masters and replicas), the
// master of a Sentinel set and its replicas (from INFO replication), else the
// one server. Any client of those servers counts.
func storeCPU(ctx context.Context, c redis.UniversalClient) (time.Duration, int) {
	var addrs []string
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		_ = cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			addrs = append(addrs, n.Options().Addr)
			mu.Unlock()
			return nil
		})
	} else {
		info, _ := c.Info(ctx, "replication").Result()
		for _, line := range strings.Split(info, "\n") {
			// slave0:ip=127.0.0.1,port=6380,state=online,...
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && strings.HasPrefix(k, "slave") {
				var ip, port string
				for _, f := range strings.Split(v, ",") {
					if x, ok := strings.CutPrefix(f, "ip="); ok {
						ip = x
					}
					if x, ok := strings.CutPrefix(f, "port="); ok {
						port = x
					}
				}
				if ip != "" && port != "" {
					addrs = append(addrs, net.JoinHostPort(ip, port))
				}
			}
		}
		var total time.Duration
		total += takeSnapshot(ctx, c, nil, nil).redisCPU
		for _, a := range addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			total += takeSnapshot(ctx, n, nil, nil).redisCPU
			_ = n.Close()
		}
		return total, 1 + len(addrs)
	}
	var total time.Duration
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		total += takeSnapshot(ctx, n, nil, nil).redisCPU
		_ = n.Close()
	}
	return total, len(addrs)
}

type haResult struct {
	sz     haSizes
	stores []*haStore
	load   string
}

func (b *bench) runHA(ctx context.Context) (out haResult, err error) {
	sz := haSizesFor(b.o.quick)
	out.sz = sz
	urls := [][2]string{{"single Redis", b.o.redisURL}, {"cluster", b.o.clusterURL}}
	if b.o.sentinelURL != "" {
		urls = append(urls, [2]string{"sentinel", b.o.sentinelURL})
	}
	defer func() {
		for _, s := range out.stores {
			if s.rp != nil {
				_ = s.rp.stop()
			}
			if s.own != nil && s.own != b.rdb {
				haCleanup(s.own, s.prefix)
				_ = s.own.Close()
			}
		}
	}()
	for i, u := range urls {
		// A key prefix of its own on each store (-redis's is cleaned up with the others).
		s := &haStore{name: u[0], url: u[1], prefix: b.kPrefix}
		if i > 0 {
			s.prefix = fmt.Sprintf("%s%c", b.kPrefix, 'a'+i)
		}
		out.stores = append(out.stores, s)
		if u[1] == b.o.redisURL {
			s.own = b.rdb
		} else {
			ru, err := redisOptions(u[1])
			if err != nil {
				return out, fmt.Errorf("%s: %w", u[0], err)
			}
			s.own = ru.NewClient()
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = s.own.Ping(pctx).Err()
			cancel()
			if err != nil {
				return out, fmt.Errorf("%s %s does not answer: %w", u[0], redisurl.Redact(u[1]), err)
			}
		}
		b.logf("(k) %s: a relay on %s, %d agents and %d targets", s.name, redisurl.Redact(s.url), sz.agents, sz.agents)
		if s.rp, err = startRelay(s.url, s.prefix, b.o.concurrency, b.hc); err != nil {
			return out, fmt.Errorf("start the relay on the %s: %w", s.name, err)
		}
		if err := s.rp.enableAgentSessions(ctx); err != nil {
			return out, err
		}
		s.orch = make([]sessionRef, sz.agents)
		s.targets = make([]string, sz.agents)
		for i := range s.orch {
			if s.orch[i], err = s.rp.createSession(ctx, fmt.Sprintf("Agent %02d", i)); err != nil {
				return out, err
			}
			t, err := s.rp.createSession(ctx, fmt.Sprintf("Target %02d", i))
			if err != nil {
				return out, err
			}
			s.targets[i] = t.ID
		}
	}
	cl := clients{inproc: b.o.inproc, tr: b.tr}
	s0 := takeSnapshot(ctx, b.rdb, nil, nil)
	first := 0
	if sz.warm {
		first = -1
	}
	for r := first; r < sz.rounds; r++ {
		for _, i := range rotated(max(r, 0), len(out.stores)) {
			s := out.stores[i]
			m := meter{rdb: s.own, rt: s.rp.rt, client: s.rp.app.Redis()}
			what := fmt.Sprintf("round %d/%d", r+1, sz.rounds)
			if r < 0 {
				what = "warm-up round (not counted)"
			}
			b.logf("(k) %s, %s: 1 client × %d send→reply, then %d agents × %d", s.name, what, sz.n1, sz.agents, sz.n2)
			queue := jobs.QueuesFor(s.prefix).Turns
			s1, err := benchSend(ctx, cl, s.rp, m, queue, s.orch[:1], s.targets[:1], 2, sz.n1)
			if err != nil {
				return out, fmt.Errorf("%s: %w", s.name, err)
			}
			c0, nodes := storeCPU(ctx, s.own)
			s2, err := benchSend(ctx, cl, s.rp, m, queue, s.orch, s.targets, 2, sz.n2)
			if err != nil {
				return out, fmt.Errorf("%s: %w", s.name, err)
			}
			c1, _ := storeCPU(ctx, s.own)
			if r < 0 {
				continue
			}
			s.send1 = append(s.send1, s1.lat.p50())
			s.thr32 = append(s.thr32, rate(s2.n, s2.wall))
			s.p50s32 = append(s.p50s32, s2.lat.p50())
			s.rts32 = append(s.rts32, s2.cost.per(s2.n).rts)
			// The warm-up round trips are in the CPU window too.
			s.rcpu32 = append(s.rcpu32, float64(c1-c0)/float64(time.Millisecond)/float64(max(1, s2.n+2*sz.agents)))
			s.nodes = nodes
		}
	}
	out.load = takeSnapshot(ctx, b.rdb, nil, nil).sub(s0).load(0)
	return out, nil
}

// haCleanup removes a relay's keys from a store other than -redis's (the
// prefix is random: every key holding it is the bench's).
func haCleanup(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = store.DeleteMatching(ctx, c, "*"+prefix+"*")
	if qs, err := c.SMembers(ctx, "asynq:queues").Result(); err == nil {
		for _, q := range qs {
			if strings.Contains(q, prefix) {
				_ = c.SRem(ctx, "asynq:queues", q).Err()
			}
		}
	}
}

func (b *bench) tableK(row rowFunc, k haResult) {
	sz := k.sz
	if len(k.stores) < 2 {
		return
	}
	base := k.stores[0]
	var where []string
	for _, s := range k.stores {
		where = append(where, fmt.Sprintf("%s %s", s.name, redisurl.Redact(s.url)))
	}
	warm := ""
	if sz.warm {
		warm = " after a warm-up round on each"
	}
	row("k", "Redis Cluster (and Sentinel) beside a single Redis: setup",
		fmt.Sprintf("relays in this process with the same config, one per store (%s), each with %d agents and %d targets; %d round(s)%s, in each the measures on every store one after the other, the order rotating by round; medians over rounds; machine during the rounds: %s",
			strings.Join(where, "; "), sz.agents, sz.agents, sz.rounds, warm, k.load), "", "")
	for _, s := range k.stores[1:] {
		var pr1, pr2 []float64 // per round
		for i := range s.send1 {
			pr1 = append(pr1, ratio(float64(s.send1[i]), float64(base.send1[i])))
			pr2 = append(pr2, ratio(base.thr32[i], s.thr32[i]))
		}
		r1 := ratio(float64(medianD(s.send1)), float64(medianD(base.send1)))
		row("k", fmt.Sprintf("send→reply p50 at 1 client (%d calls a round), %s ÷ single Redis: the medians' ratio; the per-round ratios' median", sz.n1, s.name),
			fmt.Sprintf("**%.2f×**; **%.2f×** (%s %s, single %s; per round: %s %s; single %s; ratios %s)",
				r1, medianF(pr1), s.name, fms(medianD(s.send1)), fms(medianD(base.send1)), s.name, fmsList(s.send1), fmsList(base.send1), ratioList(pr1)),
			"per-round ratios ≤ 1.2×", verdict(medianF(pr1) <= 1.2))
		r2 := ratio(medianF(base.thr32), medianF(s.thr32))
		row("k", fmt.Sprintf("%d agents × %d round trips a round, round trips/s, single Redis ÷ %s: the medians' ratio; the per-round ratios' median", sz.agents, sz.n2, s.name),
			fmt.Sprintf("**%.2f×**; **%.2f×** (%s **%.0f/s** p50 %s, single **%.0f/s** p50 %s; per round: %s %s; single %s; ratios %s; the relay client's Redis round trips per round trip: %s %.1f, single %.1f)",
				r2, medianF(pr2), s.name, medianF(s.thr32), fms(medianD(s.p50s32)), medianF(base.thr32), fms(medianD(base.p50s32)),
				s.name, fltList(s.thr32), fltList(base.thr32), ratioList(pr2), s.name, medianF(s.rts32), medianF(base.rts32))+
				fmt.Sprintf("; Redis CPU per round trip (user + system of every redis-server of the store; any client counts): %s %.3f ms over %d processes, single %.3f ms over %d",
					s.name, medianF(s.rcpu32), s.nodes, medianF(base.rcpu32), base.nodes),
			"per-round ratios ≤ 1.2×", verdict(medianF(pr2) <= 1.2))
	}
}

func ratioList(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(parts, ", ")
}
