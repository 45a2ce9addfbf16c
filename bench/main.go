// Command bench measures the relay against a real Redis and prints one
// markdown table: send→reply round trips next to the bare asynq hop and a
// Redis PING (the engine floor), list_sessions next to a bare go-sdk MCP
// server answering the same payload, the Redis memory of idle sessions, event
// fan-out to delivery, the memory of held events, and the memory and firing
// lateness of schedules.
//
//	go run ./bench -redis redis://127.0.0.1:6379/0          # full run, a few minutes
//	go run ./bench -redis redis://127.0.0.1:6379/0 -quick   # smoke run, ~30 s
//
// It uses its own key prefixes ("bench<random>") and deletes its keys and
// asynq queues at the end; it never flushes the database.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/jobs"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/store"
)

type options struct {
	redisURL     string
	quick        bool
	clients      int // (a) concurrent MCP clients / (b) asynq producers
	rounds       int // (a) measured send round trips per client
	warm         int // (a), (b) unmeasured rounds per client first
	hops         int // (b) measured hops per producer
	pings        int // (b) sequential PINGs
	concurrency  int // asynq concurrency of the relay worker and the bare hop server
	listN        int // (c) sessions in the relay
	calls        int // (c) calls per variant
	conc         int // (c) concurrent clients
	idle         int // (d) idle sessions
	rows         string
	probes       int // (e) Fanout calls per (total, matching) cell
	eventRate    int // (e) owner messages per second in the paced phase
	eventSecs    int // (e) length of the paced phase
	burst        int // (e) owner messages sent at once
	held         int // (f) events held by a digest
	heldReply    int // (f) bytes of each held event's reply text
	schedules    int // (g) active schedules whose memory is measured
	fireRate     int // (g) schedules due per second
	fireSecs     int // (g) seconds of the firing window
	profile      string
	trace        bool
	inproc       bool   // MCP clients in this process instead of a child process
	rtCallers    bool   // print the relay's Redis round trips of (a) by calling site
	goals        string // which goals of row h to measure ("123" run together)
	relayBin     string // row i: the relay binary ("" = build ./cmd/relay)
	idleSecs     int    // row i: seconds of the idle window
	idleSessions int    // row i: sessions in the idle relay
	clusterURL   string // row k: a Redis Cluster (redis+cluster://)
	sentinelURL  string // row k: a Sentinel set (redis+sentinel://), optional
	traceRuns    int    // row t: child runs of each variant (tracing off, exporting)
	goalsJSON    string // row h: also write G1 and G2's medians to this file as JSON (row t's children)
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.redisURL, "redis", os.Getenv("REDIS_URL"), "Redis URL (a real Redis; default $REDIS_URL), e.g. redis://127.0.0.1:6379/0")
	flag.BoolVar(&o.quick, "quick", false, "smoke run (~30 s): smaller sizes for every flag left unset")
	flag.IntVar(&o.clients, "clients", 50, "(a) concurrent MCP clients (orchestrator sessions) and (b) concurrent asynq producers")
	flag.IntVar(&o.rounds, "rounds", 60, "(a) measured send round trips per client")
	flag.IntVar(&o.warm, "warm", 3, "(a)/(b) unmeasured warm-up round trips per client or producer")
	flag.IntVar(&o.hops, "hops", 60, "(b) measured asynq hops per producer")
	flag.IntVar(&o.pings, "pings", 5000, "(b) sequential Redis PINGs")
	flag.IntVar(&o.concurrency, "concurrency", 0, "asynq concurrency of the relay worker and the bare hop server (0: the relay worker's default, read back from asynq's server info)")
	flag.IntVar(&o.listN, "list-sessions", 1000, "(c) sessions in the relay while list_sessions is measured")
	flag.IntVar(&o.calls, "calls", 4000, "(c) calls per variant (list_sessions, same payload, no-op)")
	flag.IntVar(&o.conc, "conc", 8, "(c) concurrent MCP clients per variant")
	flag.IntVar(&o.idle, "idle", 10000, "(d) idle sessions whose Redis memory is measured")
	flag.StringVar(&o.relayBin, "relay-bin", "", "row i: the relay binary to run (default: go build ./cmd/relay of this checkout)")
	flag.IntVar(&o.idleSecs, "idle-secs", 60, "row i: seconds of the idle window")
	flag.IntVar(&o.idleSessions, "idle-sessions", 1000, "row i: sessions in the idle relay (one with a turn)")
	flag.StringVar(&o.rows, "rows", "abcdefghpmi", "which rows to run (a, b and c run together; h: the goals G1–G5; p: paired relays; m: the embedded default beside the real Redis; i: the embedded default at rest, a real relay process; k: a Redis Cluster, -cluster, beside the single Redis, not in the default; t: G1 and G2 with the relay's traces off and exporting to a local OTLP receiver, child processes, not in the default; u: the owner's console in Chromium headless, 1,000 messages and 1,000 sessions, not in the default; y: MCP Tasks, tasks/get cost and 1,000 waiting tasks vs 1,000 blocking calls, not in the default)")
	flag.IntVar(&o.probes, "probes", 200, "(e) in-process Relay.Fanout calls per (total, matching) cell")
	flag.IntVar(&o.eventRate, "event-rate", 100, "(e) owner messages (turn_end events) per second in the paced phase")
	flag.IntVar(&o.eventSecs, "event-secs", 10, "(e) seconds of the paced phase")
	flag.IntVar(&o.burst, "burst", 2000, "(e) owner messages sent at once in the burst phase")
	flag.IntVar(&o.held, "held", 10000, "(f) events held by a digest subscription")
	flag.IntVar(&o.heldReply, "held-reply", 500, "(f) bytes of each held event's text (the turn's reply)")
	flag.IntVar(&o.schedules, "schedules", 10000, "(g) active schedules whose Redis memory is measured")
	flag.IntVar(&o.fireRate, "fire-rate", 100, "(g) schedules due per second in the firing window (one per conversation)")
	flag.IntVar(&o.fireSecs, "fire-secs", 15, "(g) seconds of the firing window (at most 20: the schedules into one conversation)")
	flag.BoolVar(&o.inproc, "inproc", false, "run the MCP clients of (a) and (c) in the relay's process instead of a child process")
	flag.StringVar(&o.goals, "goals", "12345", "row h: which goals to measure (1, 2 and 3 run together; a goal left out prints no row)")
	flag.BoolVar(&o.rtCallers, "rtcallers", false, "print to stderr where the relay's Redis round trips of (a) come from (file:line), per send round trip")
	flag.BoolVar(&o.trace, "trace", true, "with -profile, also write execution traces (they cost the profiled process CPU of their own)")
	flag.StringVar(&o.profile, "profile", "", "directory to write CPU profiles and execution traces of the send and list phases to (send.pprof, send.trace, list.pprof, list.trace)")
	flag.StringVar(&o.clusterURL, "cluster", "", "row k: a Redis Cluster URL (redis+cluster://HOST:PORT,…), measured beside -redis")
	flag.IntVar(&o.traceRuns, "trace-runs", 4, "row t: child runs of goals 1 and 2 with the relay's tracing off and as many exporting, alternating")
	flag.StringVar(&o.goalsJSON, "goals-json", "", "row h: also write goals 1 and 2's medians to this file as JSON (what row t's children report)")
	flag.StringVar(&o.sentinelURL, "sentinel", "", "row k: also a Sentinel URL (redis+sentinel://HOST:PORT,…/MASTER), beside -redis")
	flag.Parse()
	if o.quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quick := map[string]*int{"rounds": &o.rounds, "hops": &o.hops, "pings": &o.pings, "calls": &o.calls, "idle": &o.idle, "warm": &o.warm,
			"probes": &o.probes, "event-secs": &o.eventSecs, "idle-secs": &o.idleSecs, "idle-sessions": &o.idleSessions, "burst": &o.burst, "held": &o.held, "schedules": &o.schedules, "fire-secs": &o.fireSecs}
		small := map[string]int{"rounds": 10, "hops": 15, "pings": 1000, "calls": 800, "idle": 10000, "warm": 1,
			"probes": 60, "event-secs": 3, "idle-secs": 15, "idle-sessions": 100, "burst": 400, "held": 10000, "schedules": 1000, "fire-secs": 5}
		for k, p := range quick {
			if !set[k] {
				*p = small[k]
			}
		}
	}
	return o
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-driver" {
		runDriver()
		return
	}
	if len(os.Args) == 3 && os.Args[1] == idleEmbeddedMode {
		runEmbeddedIdle(os.Args[2])
		return
	}
	log.SetFlags(0)
	log.SetPrefix("bench: ")
	o := parseFlags()
	if o.redisURL == "" {
		log.Fatal("-redis (or REDIS_URL) is required: a real Redis, e.g. redis://127.0.0.1:6379/0")
	}
	if o.clients < 1 || o.conc < 1 || o.rounds < 1 || o.hops < 1 || o.calls < o.conc || o.idle < 1 || o.concurrency < 0 ||
		o.probes < 2 || o.eventRate < 1 || o.eventSecs < 1 || o.burst < 1 || o.held < 1 || o.heldReply < 0 || o.schedules < 1 || o.fireRate < 1 {
		log.Fatal("sizes must be positive (and -calls at least -conc)")
	}
	if o.fireSecs < 1 || o.fireSecs > perTarget {
		log.Fatalf("-fire-secs must be between 1 and %d", perTarget)
	}
	if strings.Trim(o.rows, "abcdefghpmiktuy") != "" || o.rows == "" {
		log.Fatal("-rows takes letters of abcdefghpmiktuy")
	}
	if o.traceRuns < 1 {
		log.Fatal("-trace-runs must be at least 1")
	}
	if strings.Contains(o.rows, "k") && o.clusterURL == "" {
		log.Fatal("row k needs -cluster URL (a Redis Cluster: bash .ci/redis-cluster start DIR prints one)")
	}
	if o.listN < 2*o.clients {
		o.listN = 2 * o.clients
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := newBench(ctx, o)
	if err != nil {
		log.Fatal(err)
	}
	table, runErr := b.run(ctx)
	if err := b.cleanup(); err != nil {
		log.Printf("cleanup: %v", err)
	}
	if runErr != nil {
		log.Fatal(runErr)
	}
	fmt.Print(table)
}

type bench struct {
	o         options
	rdb       redis.UniversalClient
	ropts     *redisurl.URL
	tr        *http.Transport
	hc        *http.Client
	prefix    string // relay of (a)–(c); its asynq queues are PREFIX:turns and PREFIX:hop
	memPrefix string // relay of (d)
	evPrefix  string // relay of (e)
	hdPrefix  string // relay of (f)
	scPrefix  string // relay of (g)
	g1Prefix  string // relay of goals 1–3
	g4Prefix  string // relay (and second worker) of goal 4
	g5Prefix  string // relay of goal 5
	pPrefix   string // relays of (p): PREFIXa and PREFIXb
	iPrefix   string // relays of (i)
	mPrefix   string // relays of (m) (the real Redis's one; the embedded ones use it too, in stores of their own)
	kPrefix   string // relays of (k), one on each store
	uPrefix   string // relay of (u)
	yPrefix   string // relays of (y): PREFIXt and PREFIXb
	// tasksPrefixes are the prefixes (y) started relays on.
	tasksPrefixes []string
	conc          int // the relay worker's asynq concurrency, as asynq reports it
	worker        *asynq.ServerInfo
	start         time.Time
}

// redisOptions are the relay's own client settings (app/app.go).
func redisOptions(url string) (*redisurl.URL, error) {
	u, err := redisurl.Parse(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	u.Tune(redisurl.Tuning{DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxRetries: 1, PoolSize: 64})
	return u, nil
}

func newBench(ctx context.Context, o options) (*bench, error) {
	ropts, err := redisOptions(o.redisURL)
	if err != nil {
		return nil, err
	}
	rdb := ropts.NewClient()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s does not answer: %w", o.redisURL, err)
	}
	// One transport for every HTTP client here, with enough idle connections
	// for all concurrent callers (http.DefaultTransport keeps 2 per host).
	tr := newTransport()
	return &bench{o: o, rdb: rdb, ropts: ropts, tr: tr, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second},
		prefix: newPrefix(), memPrefix: newPrefix(), evPrefix: newPrefix(), hdPrefix: newPrefix(), scPrefix: newPrefix(),
		g1Prefix: newPrefix(), g4Prefix: newPrefix(), g5Prefix: newPrefix(), pPrefix: newPrefix(), mPrefix: newPrefix(), iPrefix: newPrefix(), kPrefix: newPrefix(), uPrefix: newPrefix(), yPrefix: newPrefix(), start: time.Now()}, nil
}

func (b *bench) where() string {
	if b.o.inproc {
		return "this process"
	}
	return "a child process"
}

func (b *bench) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%5.1fs] "+format+"\n", append([]any{time.Since(b.start).Seconds()}, a...)...)
}

// cleanup deletes every key of this run: the prefixes' keys, their asynq
// queues' keys and their entries in asynq:queues.
func (b *bench) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []error
	queues, err := b.rdb.SMembers(ctx, "asynq:queues").Result()
	errs = append(errs, err)
	for _, p := range append([]string{b.prefix, b.memPrefix, b.evPrefix, b.hdPrefix, b.scPrefix, b.g1Prefix, b.g4Prefix, b.g5Prefix, b.pPrefix + "a", b.pPrefix + "b", b.mPrefix, b.iPrefix, b.kPrefix, b.uPrefix}, b.tasksPrefixes...) {
		errs = append(errs, store.DeleteMatching(ctx, b.rdb, store.KeyBase(p)+"*"))
		errs = append(errs, store.DeleteMatching(ctx, b.rdb, "asynq:{"+p+"}*")) // the relay's queues
		errs = append(errs, store.DeleteMatching(ctx, b.rdb, "asynq:{"+p+":*")) // the bench's own (hop)
		for _, q := range queues {
			if strings.HasPrefix(q, p+":") || strings.HasPrefix(q, p+"}") {
				errs = append(errs, b.rdb.SRem(ctx, "asynq:queues", q).Err())
			}
		}
	}
	errs = append(errs, b.rdb.Close())
	b.tr.CloseIdleConnections()
	return errors.Join(errs...)
}

// profileStart writes a CPU profile (NAME.pprof) and an execution trace
// (NAME.trace) of a phase into -profile's directory.
func (b *bench) profileStart(name string) func() {
	if b.o.profile == "" {
		return func() {}
	}
	if err := os.MkdirAll(b.o.profile, 0o755); err != nil {
		log.Printf("profile: %v", err)
		return func() {}
	}
	pf, err := os.Create(filepath.Join(b.o.profile, name+".pprof"))
	if err != nil {
		log.Printf("profile: %v", err)
		return func() {}
	}
	var tf *os.File
	if b.o.trace {
		if tf, err = os.Create(filepath.Join(b.o.profile, name+".trace")); err != nil {
			log.Printf("profile: %v", err)
			_ = pf.Close()
			return func() {}
		}
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		log.Printf("profile: %v", err)
	}
	if tf != nil {
		if err := trace.Start(tf); err != nil {
			log.Printf("trace: %v", err)
		}
	}
	return func() {
		if tf != nil {
			trace.Stop()
			_ = tf.Close()
		}
		pprof.StopCPUProfile()
		_ = pf.Close()
	}
}

type results struct {
	ping dist
	hop  hopResult
	send sendResult
	list listResult
	mem  memResult
	ev   eventsResult
	hd   heldResult
	sc   schedResult
	gl   goalsResult
	pr   peerResult
	em   embResult
	id   idleResult
	ha   haResult
	tr   tracingResult
	ui   consoleResult
	ts   tasksResult
}

// runs reports whether -rows asks for a row (a, b and c run together).
func (o options) runs(row string) bool {
	if strings.ContainsAny(row, "abc") {
		return strings.ContainsAny(o.rows, "abc")
	}
	return strings.Contains(o.rows, row)
}

func (b *bench) run(ctx context.Context) (string, error) {
	o := b.o
	var res results
	var err error
	// (h) the goals of the performance issue, each in relays of their own,
	// first: on a fresh process and Redis, before the rows below leave their
	// keys (d–g keep theirs until the end) and a large heap behind.
	if o.runs("h") {
		b.logf("(h) goals, prefixes %s %s %s", b.g1Prefix, b.g4Prefix, b.g5Prefix)
		res.gl, err = b.runGoals(ctx)
		if err != nil {
			return "", fmt.Errorf("(h): %w", err)
		}
		if o.goalsJSON != "" {
			data, err := json.Marshal(summarize12(res.gl, o.quick))
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(o.goalsJSON, data, 0o644); err != nil {
				return "", fmt.Errorf("(h): %w", err)
			}
		}
	}
	// (t) goals 1 and 2 with the relay's traces off and exporting, in child processes.
	if o.runs("t") {
		b.logf("(t) tracing off vs exporting: %d child runs of each", o.traceRuns)
		if res.tr, err = b.runTracing(ctx); err != nil {
			return "", fmt.Errorf("(t): %w", err)
		}
	}
	if o.runs("a") {
		if err := b.runABC(ctx, &res); err != nil {
			return "", err
		}
	}
	// (d) memory of idle sessions, in a relay of its own.
	if o.runs("d") {
		b.logf("(d) %d idle sessions, prefix %s", o.idle, b.memPrefix)
		if res.mem, err = benchMemory(ctx, b.rdb, o.redisURL, b.memPrefix, o.concurrency, o.idle, b.hc); err != nil {
			return "", err
		}
	}
	// (e) events through fan-out to delivery, in a relay of its own.
	if o.runs("e") {
		b.logf("(e) events, prefix %s", b.evPrefix)
		stopProf := b.profileStart("events")
		res.ev, err = benchEvents(ctx, b, b.evPrefix)
		stopProf()
		if err != nil {
			return "", fmt.Errorf("(e): %w", err)
		}
	}
	// (f) memory of held events, in a relay of its own.
	if o.runs("f") {
		b.logf("(f) %d held events, prefix %s", o.held, b.hdPrefix)
		if res.hd, err = benchHeld(ctx, b, b.hdPrefix); err != nil {
			return "", fmt.Errorf("(f): %w", err)
		}
	}
	// (g) schedules: memory and firing lateness, in a relay of its own.
	if o.runs("g") {
		b.logf("(g) schedules, prefix %s", b.scPrefix)
		stopProf := b.profileStart("schedules")
		res.sc, err = benchSchedules(ctx, b, b.scPrefix)
		stopProf()
		if err != nil {
			return "", fmt.Errorf("(g): %w", err)
		}
	}
	// (p) paired relays: a cross-relay send and remote event delivery.
	if o.runs("p") {
		rounds, events := 200, 20
		if o.quick {
			rounds, events = 30, 6
		}
		b.logf("(p) paired relays, prefixes %sa %sb", b.pPrefix, b.pPrefix)
		if res.pr, err = benchPeer(ctx, b, b.pPrefix, rounds, events); err != nil {
			return "", fmt.Errorf("(p): %w", err)
		}
	}
	// (m) the embedded default beside the real Redis.
	if o.runs("m") {
		b.logf("(m) the embedded default beside the real Redis, prefix %s", b.mPrefix)
		if res.em, err = b.runEmbedded(ctx); err != nil {
			return "", fmt.Errorf("(m): %w", err)
		}
	}
	// (i) the embedded default at rest: real relay processes.
	if o.runs("i") {
		b.logf("(i) the embedded default at rest, %d s windows, prefix %s", o.idleSecs, b.iPrefix)
		if res.id, err = b.runIdle(ctx); err != nil {
			return "", fmt.Errorf("(i): %w", err)
		}
	}
	// (k) a Redis Cluster (and a Sentinel set) beside the single Redis.
	if o.runs("k") {
		b.logf("(k) the cluster beside the single Redis, prefix %s", b.kPrefix)
		if res.ha, err = b.runHA(ctx); err != nil {
			return "", fmt.Errorf("(k): %w", err)
		}
	}
	// (u) the owner's console in Chromium headless.
	if o.runs("u") {
		loads := 5
		if o.quick {
			loads = 3
		}
		b.logf("(u) the console in Chromium headless, prefix %s", b.uPrefix)
		if res.ui, err = benchConsole(ctx, b, b.uPrefix, 1000, 1000, loads); err != nil {
			return "", fmt.Errorf("(u): %w", err)
		}
	}
	// (y) MCP Tasks.
	if o.runs("y") {
		b.logf("(y) MCP Tasks, prefixes %st and %sb", b.yPrefix, b.yPrefix)
		if res.ts, err = b.runTasks(ctx, b.yPrefix); err != nil {
			return "", fmt.Errorf("(y): %w", err)
		}
	}
	b.logf("done")
	return b.table(ctx, res), nil
}

// runABC runs (a), (b) and (c) against one relay.
func (b *bench) runABC(ctx context.Context, res *results) error {
	o := b.o
	b.logf("redis %s, prefix %s; starting the relay", o.redisURL, b.prefix)
	rp, err := startRelay(o.redisURL, b.prefix, o.concurrency, b.hc)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = rp.stop()
		}
	}()
	if err := rp.enableAgentSessions(ctx); err != nil {
		return err
	}
	if b.worker, err = workerConfig(ctx, b.rdb, jobs.QueuesFor(b.prefix).Turns); err != nil {
		return err
	}
	b.conc = b.worker.Concurrency
	// Sessions: fillers first (in-process), then the orchestrators and their
	// targets through the owner API, so the newest 50 that list_sessions
	// shows are the targets with their conversations.
	fillers := o.listN - 2*o.clients
	b.logf("creating %d filler sessions in-process", fillers)
	if err := rp.createSessions(ctx, fillers, 16, "Filler session"); err != nil {
		return err
	}
	b.logf("creating %d orchestrator and %d target sessions through the owner API", o.clients, o.clients)
	orch := make([]sessionRef, o.clients)
	targets := make([]string, o.clients)
	for i := 0; i < o.clients; i++ {
		if orch[i], err = rp.createSession(ctx, fmt.Sprintf("Orchestrator %02d", i)); err != nil {
			return err
		}
		t, err := rp.createSession(ctx, fmt.Sprintf("Target %02d", i))
		if err != nil {
			return err
		}
		targets[i] = t.ID
	}

	// (b) the floor: PING, then the bare asynq hop.
	b.logf("(b) %d Redis PINGs", o.pings)
	if res.ping, err = benchPing(ctx, b.rdb, o.pings); err != nil {
		return err
	}
	b.logf("(b) bare asynq hop: %d producers × %d hops, concurrency %d and %d queues (as the relay worker's)", o.clients, o.hops, b.conc, len(b.worker.Queues))
	if res.hop, err = benchHop(ctx, b.ropts, b.rdb, b.prefix, jobs.QueuesFor(b.prefix).Turns, b.worker, o.clients, o.warm, o.hops); err != nil {
		return err
	}
	if res.hop.errs > 0 {
		return fmt.Errorf("asynq hop: %d failed, first: %w", res.hop.errs, res.hop.err)
	}

	// (a) send → reply.
	cl := clients{inproc: o.inproc, tr: b.tr}
	b.logf("(a) send→reply: %d MCP clients × %d round trips (clients in %s)", o.clients, o.rounds, b.where())
	m := meter{rdb: b.rdb, rt: rp.rt, client: rp.app.Redis()}
	stopProf := b.profileStart("send")
	rp.rt.callers.Store(o.rtCallers)
	res.send, err = benchSend(ctx, cl, rp, m, jobs.QueuesFor(b.prefix).Turns, orch, targets, o.warm, o.rounds)
	rp.rt.callers.Store(false)
	stopProf()
	if err != nil {
		return err
	}
	if o.rtCallers {
		fmt.Fprintf(os.Stderr, "the relay's Redis round trips during (a) by calling site, per send round trip (%d round trips):\n", res.send.n)
		for _, l := range rp.rt.sites() {
			var k int
			var rest string
			if _, err := fmt.Sscanf(l, "%d", &k); err == nil {
				_, rest, _ = strings.Cut(strings.TrimSpace(l), " ")
				fmt.Fprintf(os.Stderr, "  %5.2f  %s\n", float64(k)/float64(res.send.n), rest)
			}
		}
	}

	// (c) list_sessions next to a bare go-sdk server.
	b.logf("(c) list_sessions with %d sessions: %d calls per variant, %d concurrent", o.listN, o.calls, o.conc)
	stopProf = b.profileStart("list")
	res.list, err = benchList(ctx, cl, rp, m, orch[0].Token, b.tr, o.conc, o.calls, 20, o.clients, o.clients*o.rounds)
	stopProf()
	if err != nil {
		return err
	}
	stopped = true
	return rp.stop()
}

func (b *bench) table(ctx context.Context, r results) string {
	o := b.o
	var sb strings.Builder
	row := func(id, what, result, target, v string) {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s |\n", id, what, result, target, v)
	}
	mode := "full"
	if o.quick {
		mode = "quick"
	}
	sb.WriteString("| # | measure | result | target | verdict |\n|---|---|---|---|---|\n")
	worker := "relay worker's asynq concurrency: the relay's default"
	if o.concurrency > 0 {
		worker = fmt.Sprintf("relay worker's asynq concurrency %d", o.concurrency)
	}
	if b.worker != nil {
		worker = fmt.Sprintf("relay worker's asynq config (also the bare hop's): concurrency %d, %d queues, the waker (worker/wake.go: pub/sub wake-up, %s idle check), TaskCheckInterval 1ms, DelayedTaskCheckInterval 100ms (forward scripts answered locally while nothing is due); MCP clients in %s",
			b.conc, len(b.worker.Queues), idleCheckText(), b.where())
	}
	row("run", "setup", fmt.Sprintf("%s run, rows %s; Redis %s at %s; %s, GOMAXPROCS %d, %d CPUs; %s",
		mode, o.rows, serverInfo(ctx, b.rdb), b.o.redisURL, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), worker), "", "")
	if o.runs("h") {
		b.tableGoals(row, r.gl)
	}
	if o.runs("t") {
		b.tableT(row, r.tr)
	}
	if o.runs("a") {
		b.tableABC(row, r)
	}
	if o.runs("d") {
		b.tableD(row, r)
	}
	if o.runs("e") {
		b.tableE(row, r.ev)
	}
	if o.runs("f") {
		b.tableF(row, r.hd)
	}
	if o.runs("g") {
		b.tableG(row, r.sc)
	}
	if o.runs("p") {
		tablePeer(row, r.pr)
	}
	if o.runs("m") {
		b.tableM(row, r.em)
	}
	if o.runs("i") {
		b.tableI(row, r.id)
	}
	if o.runs("k") {
		b.tableK(row, r.ha)
	}
	if o.runs("u") {
		tableConsole(row, r.ui)
	}
	if o.runs("y") {
		b.tableY(row, r.ts)
	}
	return sb.String()
}

type rowFunc func(id, what, result, target, v string)

func (b *bench) tableABC(row rowFunc, r results) {
	o := b.o
	s := r.send
	row("a", fmt.Sprintf("send→reply round trip, scripted instant reply (\"x\"→\"echo: x\"), %d MCP clients each sending to its own target, wait_seconds 30", o.clients),
		fmt.Sprintf("p50 **%s**, p99 %s (n=%d)", fms(s.lat.p50()), fms(s.lat.p99()), s.n), "", "")
	row("a", "send→reply throughput", frate(rate(s.n, s.wall), "round trips/s"), "", "")
	row("a", "where a round trip goes, p50 (turn record timestamps are whole ms)",
		fmt.Sprintf("call→queued %s · queued→turn start %s · turn %s · turn end→reply at client %s",
			fms(s.stages[0].p50()), fms(s.stages[1].p50()), fms(s.stages[2].p50()), fms(s.stages[3].p50())), "", "")
	row("a", "asynq queue of the relay during the phase (sampled every 10 ms)",
		fmt.Sprintf("mean %.1f tasks pending, %.1f active (concurrency %d)", s.pending, s.active, b.conc), "", "")
	cpuNote := "the clients ran in a child process"
	if o.inproc {
		cpuNote = "-inproc: the relay process's CPU includes the clients"
	}
	row("a", "cost per round trip ("+cpuNote+")", s.cost.per(s.n).withClient(s.client, s.n).String(), "", "")
	row("a", "the relay's Redis round trips during (a), as its go-redis client sees them", fmt.Sprintf("p50 %s, p99 %s (n=%d)", fms(s.rtLat.p50()), fms(s.rtLat.p99()), len(s.rtLat)), "", "")
	row("a", "machine load during (a)", s.cost.load(s.client), "", "")
	row("a", "same, p99", fmt.Sprintf("call→queued %s · queued→turn start %s · turn %s · turn end→reply at client %s",
		fms(s.stages[0].p99()), fms(s.stages[1].p99()), fms(s.stages[2].p99()), fms(s.stages[3].p99())), "", "")

	h := r.hop
	row("b", fmt.Sprintf("bare asynq hop, Enqueue→handler start, same config, %d concurrent producers", o.clients),
		fmt.Sprintf("p50 **%s**, p99 %s (n=%d)", fms(h.lat.p50()), fms(h.lat.p99()), h.n), "", "")
	row("b", "bare asynq throughput", frate(rate(h.n, h.wall), "hops/s"), "", "")
	row("b", "cost per hop (the relay process is this process)", h.cost.per(h.n).String(), "", "")
	row("b", "the hop client's Redis round trips during (b)", fmt.Sprintf("p50 %s, p99 %s (n=%d)", fms(h.rtLat.p50()), fms(h.rtLat.p99()), len(h.rtLat)), "", "")
	row("b", "machine load during (b)", h.cost.load(0), "", "")
	row("b", "Redis PING, one client, sequential", fmt.Sprintf("p50 %s, p99 %s (n=%d)", fms(r.ping.p50()), fms(r.ping.p99()), len(r.ping)), "", "")
	sendRatio := ratio(float64(s.lat.p50()), float64(h.lat.p50()))
	row("a/b", "send→reply p50 ÷ bare hop p50", fmt.Sprintf("**%.2f×** (%s vs %s; the relay adds %s at p50)", sendRatio, fms(s.lat.p50()), fms(h.lat.p50()), fms(s.lat.p50()-h.lat.p50())),
		"≤ 1.5×", verdict(sendRatio <= 1.5))
	na := r.list.noopA
	row("a/b", fmt.Sprintf("MCP floor of (a): bare go-sdk server, no-op tool, %d concurrent clients (same client)", o.clients),
		fmt.Sprintf("p50 %s, p99 %s, %s · send→reply p50 ÷ this p50: %.1f×", fms(na.lat.p50()), fms(na.lat.p99()), frate(na.perSec(), "calls/s"),
			ratio(float64(s.lat.p50()), float64(na.lat.p50()))), "", "")
	row("a/b", "send→reply p99 ÷ bare hop p99", fmt.Sprintf("%.2f×", ratio(float64(s.lat.p99()), float64(h.lat.p99()))), "", "")
	row("a/b", "round trips/s ÷ hops/s", fmt.Sprintf("%.2f", ratio(rate(s.n, s.wall), rate(h.n, h.wall))), "", "")

	l := r.list
	callRow := func(id, what string, c callResult) {
		row(id, what, fmt.Sprintf("**%s**, p50 %s, p99 %s (n=%d)", frate(c.perSec(), "calls/s"), fms(c.lat.p50()), fms(c.lat.p99()), c.n), "", "")
	}
	callRow("c", fmt.Sprintf("list_sessions over MCP, %d sessions in the relay, limit 50 (%d shown, result %d bytes), %d concurrent clients",
		l.sessions, l.shown, l.payloadBytes, o.conc), l.relay)
	callRow("c2", "bare go-sdk server (stateless Streamable HTTP), tool returns that result verbatim, same client and concurrency", l.same)
	callRow("c3", "bare go-sdk server, no-op tool", l.noop)
	lc, sc, nc := l.relay.cost.per(l.relay.n), l.same.cost.per(l.same.n), l.noop.cost.per(l.noop.n)
	row("c", "cost per call: list_sessions · same payload · no-op",
		fmt.Sprintf("list_sessions %.1f Redis round trips, %.0f commands · server CPU %s · %s · %s", lc.rts, lc.cmds,
			fms(lc.procCPU), fms(sc.procCPU), fms(nc.procCPU)), "", "")
	cr := ratio(l.relay.perSec(), l.same.perSec())
	row("c", "machine load during (c), all variants", l.relay.cost.add(l.same.cost).add(l.noop.cost).load(l.relay.client+l.same.client+l.noop.client), "", "")
	row("c/c2", "list_sessions calls/s ÷ same-payload calls/s", fmt.Sprintf("**%.2f** (the same payload is %.1f× faster)", cr, 1/cr), "≥ 0.33 (within 3×)", verdict(cr >= 1.0/3))
	pr := ratio(float64(l.relay.lat.p99()), float64(l.same.lat.p99()))
	row("c/c2", "list_sessions p99 ÷ same-payload p99", fmt.Sprintf("**%.2f×**", pr), "≤ 3×", verdict(pr <= 3))
	row("c2/c3", "same-payload calls/s ÷ no-op calls/s (cost of the payload alone)", fmt.Sprintf("%.2f", ratio(l.same.perSec(), l.noop.perSec())), "", "")
}

func (b *bench) tableD(row rowFunc, r results) {
	m := r.mem
	total10k := m.usagePer() * 10000 / mib
	row("d", fmt.Sprintf("idle sessions in Redis: %d created, %d keys under the prefix", m.n, m.keys),
		fmt.Sprintf("MEMORY USAGE sum: **%.0f B/session**; INFO used_memory delta: %.0f B/session", m.usagePer(), m.usedPer()), "", "")
	row("d", "idle sessions: total for 10,000",
		fmt.Sprintf("**%.1f MiB** (MEMORY USAGE); %.1f MiB (used_memory delta)", total10k, m.usedPer()*10000/mib), "< 50 MiB",
		verdict(total10k < 50 && m.usedPer()*10000/mib < 50))
}
