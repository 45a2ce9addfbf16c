// Package app wires the relay's parts into one process: Redis (real or
// embedded), the store, the domain, the asynq worker, the HTTP API, metrics
// and the time loops. cmd/relay only parses flags and signals; tests and the
// bench program start the same App on 127.0.0.1:0.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/api"
	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/embedded"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/jobs/asynqjobs"
	"github.com/oar/relay/metrics"
	"github.com/oar/relay/otelx"
	"github.com/oar/relay/peer"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/redisurl"
	"github.com/oar/relay/repos"
	"github.com/oar/relay/store"
	"github.com/oar/relay/storelog"
	"github.com/oar/relay/webhook"
	"github.com/oar/relay/worker"
)

// Version is the relay's version (set with -ldflags at build time).
var Version = "0.9.4-dev"

// Modes of a process.
const (
	ModeServe  = "serve"  // API, worker and scheduler
	ModeWorker = "worker" // worker and scheduler only
)

// ListenError is an address the process cannot listen on (a bad flag: exit 2).
type ListenError struct {
	Flag, Addr string
	Err        error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("%s %s: cannot listen: %v", e.Flag, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// Options are the process settings that are not user configuration.
type Options struct {
	Mode        string
	KeyPrefix   string // Redis key prefix and queue namespace (default "relay")
	Logger      *slog.Logger
	Concurrency int
	// MaxWaitCap caps the longest wait per call below the settings (tests only).
	MaxWaitCap time.Duration
	MCP        api.MCPOptions
	// SweepEvery is the interval of the lost-drain sweep (default 5s, R18.11).
	SweepEvery time.Duration
	// ShutdownGrace bounds how long in-flight HTTP requests may finish (default 5s).
	ShutdownGrace time.Duration
	// Clock, when set, replaces the wall clock of the domain (tests run a faster one).
	Clock *clock.Scaled
	// StallScanEvery is how often the stall scan is started (default 30s).
	StallScanEvery time.Duration
	// EmbeddedEvery is the embedded store's checkpoint interval (default 1 s,
	// R20.1; the bench turns checkpoints off with a huge one).
	EmbeddedEvery time.Duration
}

// App is one relay process.
type App struct {
	cfg  config.Config
	opts Options
	log  *slog.Logger
	// health is a.log's handler: a store that does not answer logs each
	// failure once a minute at most, and "store reachable again" (R25.3).
	health *storelog.Handler

	emb      *embedded.Server // the embedded store (no Redis URL), else nil
	rdb      redis.UniversalClient
	st       *store.Store
	relay    *domain.Relay
	work     *worker.Worker
	met      *metrics.Metrics
	hooks    *webhook.Sender // the owner's webhooks (R23.10), nil when none
	aq       *asynq.Client
	insp     *asynq.Inspector
	queues   jobs.Queues
	scripted *provider.Scripted
	provs    []provider.Provider

	clock      func() time.Time
	started    chan struct{}
	addr       string
	ownerToken string
	// ownerTokenHash is the hex SHA-256 of the owner token in force: the
	// only form of a generated one kept (R18.19).
	ownerTokenHash string
	draining       bool
	mu             sync.Mutex
	// tracing: OpenTelemetry traces are on (R25.1, OTEL_* variables);
	// endTraces flushes and ends them (a no-op when off).
	tracing   bool
	endTraces func(context.Context) error
}

// New connects to Redis and builds the process; Run starts it.
func New(cfg config.Config, o Options) (*App, error) {
	o = o.withDefaults()
	health := storelog.New(o.Logger.Handler())
	a := &App{cfg: cfg, opts: o, log: slog.New(health), health: health, started: make(chan struct{})}
	sbs, err := newSandboxes(cfg, o.Logger) // R18.31: before anything is opened
	if err != nil {
		return nil, err
	}
	us, err := newUsers(cfg, os.Geteuid()) // R18.26: the providers' users, as early
	if err != nil {
		return nil, err
	}
	// R18.36: a secret given as a flag is readable by every user of the
	// machine; say so (never the secret), with the file to use instead.
	for _, w := range cfg.CommandLineWarnings() {
		a.log.Warn(w, "pid", os.Getpid())
	}
	if err := a.openStore(); err != nil {
		return nil, err
	}
	if err := a.setupTracing(); err != nil {
		a.close()
		return nil, err
	}
	a.met = metrics.New()

	provs, scripted, err := buildProviders(cfg, a.log, sbs, us)
	if err != nil {
		a.close()
		return nil, err
	}
	sbs.hide(cfg, provs)
	a.scripted = scripted
	a.provs = provs
	a.clock = time.Now
	if o.Clock != nil {
		a.clock = o.Clock.Now
	}
	a.relay = domain.New(a.st, asynqjobs.NewClient(a.aq, a.insp, a.queues), provs, a.relayOptions())
	wo := worker.Options{Queues: a.queues, Concurrency: o.Concurrency, Logger: a.log}
	if a.emb != nil {
		wo.IdleCheck = worker.EmbeddedIdleCheck // one process: every enqueue goes through its waker
	}
	a.work = worker.New(a.rdb, a.relay, wo)
	a.addGauges()
	return a, nil
}

// withDefaults fills the options left unset.
func (o Options) withDefaults() Options {
	if o.Mode == "" {
		o.Mode = ModeServe
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "relay"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = 5 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.StallScanEvery <= 0 {
		o.StallScanEvery = 30 * time.Second
	}
	return o
}

// openStore opens the Redis the process works on (the embedded store without
// a Redis URL) and the clients on it: the store, the queues' client and
// inspector.
func (a *App) openStore() error {
	ru, err := a.redisURL()
	if err != nil {
		return err
	}
	ru.Tune(redisurl.Tuning{DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
		MaxRetries: 1, PoolSize: 64})
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{slog.Default()}) }) // a global of go-redis: set once
	a.rdb = ru.NewClient()
	a.rdb.AddHook(store.UnreachableHook()) // R25.3: the store's silence, told apart from any other
	a.st = store.New(a.rdb, a.opts.KeyPrefix)
	a.queues = jobs.QueuesFor(a.opts.KeyPrefix)
	a.aq = asynq.NewClientFromRedisClient(a.rdb)
	a.insp = asynq.NewInspectorFromRedisClient(a.rdb)
	return nil
}

// redisURL is the configured Redis URL with its password file's password,
// or, without one, the embedded store's, opened here.
func (a *App) redisURL() (*redisurl.URL, error) {
	if a.cfg.RedisURL == "" {
		// R20: the embedded store on a loopback port of its own (no
		// fixed-size pipe: pipelines and scripts of any size), kept in the
		// data directory. A directory in use or a file that cannot be read
		// stops the start here, touching nothing.
		emb, err := embedded.Open(embedded.Options{Dir: a.cfg.DataDir, Logger: a.log, Every: a.opts.EmbeddedEvery})
		if err != nil {
			return nil, err
		}
		a.emb = emb
		a.log.Info("Redis: the embedded store (no --redis / REDIS_URL), kept in the data directory; one process only: set REDIS_URL for a real Redis and several workers",
			"data_dir", emb.Dir())
		return &redisurl.URL{Kind: redisurl.Single, Simple: &redis.Options{Addr: emb.Addr(), Password: emb.Password()}}, nil
	}
	u, err := redisurl.Parse(a.cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if a.cfg.RedisPassword != "" { // read from RELAY_REDIS_PASSWORD_FILE (R18.36)
		u.SetPassword(a.cfg.RedisPassword)
	}
	return u, nil
}

// setupTracing turns OpenTelemetry traces on when an OTLP endpoint is set,
// else leaves nothing at all (the global no-op tracer provider, no exporter,
// no instrumentation; R25.1).
func (a *App) setupTracing() error {
	var err error
	if a.tracing, a.endTraces, err = otelx.Setup(context.Background(), a.cfg.Name); err != nil {
		return err
	}
	if !a.tracing {
		return nil
	}
	if err := otelx.Redis(a.rdb); err != nil { // the store's commands, inside a trace
		return err
	}
	a.log.Info("OpenTelemetry traces on", "protocol", otelx.Protocol())
	return nil
}

// relayOptions are the domain's options; with webhooks configured it makes
// their sender (a.hooks).
func (a *App) relayOptions() domain.Options {
	cfg, o := a.cfg, a.opts
	peers := peer.NewClient()
	if a.tracing { // a call to a paired relay carries the traceparent header (R25.1)
		peers.WrapTransport(otelx.Transport)
	}
	ropt := domain.Options{
		Name: cfg.Name, Version: Version, Folders: cfg.Folders, DefaultCwd: cfg.DefaultCwd,
		Settings: cfg.Settings, Timing: cfg.Timing, Limits: cfg.Limits, Logger: a.log, Metrics: a.met,
		MaxWaitCap: o.MaxWaitCap, Caps: map[string]domain.Cap{}, Traits: map[string]domain.SessionTraits{},
		Peers: peers, Repos: &repos.Manager{Dir: cfg.ReposDir(), BaseURL: cfg.Repos.BaseURL},
	}
	if o.Mode == ModeServe {
		// The worker runs here too: a prompt whose caller waits may start
		// its drain here (limits.direct_starts at once).
		ropt.DirectDrains = cfg.Limits.DirectStarts
	}
	for _, p := range cfg.Providers {
		if p.MonthlyCap > 0 {
			ropt.Caps[p.ID] = domain.Cap{Amount: p.MonthlyCap, Unit: p.CapUnit}
		}
		ropt.Traits[p.ID] = domain.SessionTraits{Claude: p.ClaudeSessions(), CompactWindowZero: p.CompactWindowZero, AlwaysThinks: p.AlwaysThinks,
			Billing: p.Billing, Repos: p.TakesRepos()}
	}
	if o.Clock != nil {
		ropt.Clock = o.Clock
	}
	if len(cfg.Notify.Webhooks) > 0 { // R23.10: the owner's notifications also go to the config's webhooks
		a.hooks = webhook.New(webhook.Options{Relay: cfg.Name, Hooks: cfg.Notify.Webhooks, Count: a.met.WebhookResult, Logger: a.log})
		ropt.Notices = a.hooks
	}
	return ropt
}

// addGauges registers the process's gauges: queues, pending cards, active
// sessions, offline paired relays, held events.
func (a *App) addGauges() {
	a.met.AddQueues(a.queueStats)
	a.met.AddGauge("relay_cards_pending", "Approval cards waiting for the owner.", func() float64 {
		c, _, _ := a.counts()
		return float64(c)
	})
	a.met.AddGauge("relay_sessions_active", "Sessions that are not archived.", func() float64 {
		_, s, _ := a.counts()
		return float64(s)
	})
	a.met.AddGauge("relay_paired_relays_offline", "Paired relays whose last hello, call or poll got no answer (or a rejected token).", a.offlineLinks)
	a.met.AddGauge("relay_events_held", "Events held by digests and quiet hours.", func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, _ := a.st.HeldTotal(ctx)
		return float64(n)
	})
}

// offlineLinks counts the paired relays that are offline (0 when the store
// does not answer).
func (a *App) offlineLinks() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	links, err := a.st.Links(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range links {
		if !l.Online {
			n++
		}
	}
	return float64(n)
}

func (a *App) counts() (int64, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.st.Counts(ctx)
}

func (a *App) queueStats() []metrics.QueueStat {
	var out []metrics.QueueStat
	for name, q := range map[string]string{"turns": a.queues.Turns, "events": a.queues.Events} {
		info, err := a.insp.GetQueueInfo(q)
		if err != nil {
			out = append(out, metrics.QueueStat{Queue: name})
			continue
		}
		out = append(out, metrics.QueueStat{Queue: name, Pending: info.Pending, Active: info.Active, Retry: info.Retry, Latency: info.Latency})
	}
	return out
}

// Metrics returns the process's metrics registry.
func (a *App) Metrics() *metrics.Metrics { return a.met }

// Tracing reports whether this process sends OpenTelemetry traces (R25.1).
func (a *App) Tracing() bool { return a.tracing }

// Relay returns the domain service (tests).
func (a *App) Relay() *domain.Relay { return a.relay }

// Store returns the store (tests, bench).
func (a *App) Store() *store.Store { return a.st }

// Redis returns the shared client.
func (a *App) Redis() redis.UniversalClient { return a.rdb }

// Embedded is the embedded store, nil on a real Redis.
func (a *App) Embedded() *embedded.Server { return a.emb }

// Started is closed once the process serves.
func (a *App) Started() <-chan struct{} { return a.started }

// Addr is the API's bound address (serve mode, after Started).
func (a *App) Addr() string { return a.addr }

// URL is the API's base URL.
func (a *App) URL() string { return "http://" + a.addr }

// procBeat is how often a process refreshes its entry in P:procs; entries
// not refreshed for 4 beats count as gone.
const procBeat = 15 * time.Second

func (a *App) proc() store.Proc {
	host, _ := os.Hostname()
	return store.Proc{ID: a.relay.WorkerID(), Name: a.cfg.Name, Role: a.opts.Mode, Host: host, PID: os.Getpid(),
		Version: Version, Seen: time.Now().UTC()}
}

// announce records this process and warns when another live process on the
// same Redis and key prefix calls itself a different relay: they would run
// each other's turns (one relay = one name per Redis prefix).
func (a *App) announce(ctx context.Context) {
	others, err := a.st.LiveProcs(ctx, time.Now().Add(-4*procBeat))
	if err != nil {
		a.log.Warn("read the relay's processes", "err", err)
	}
	for _, p := range others {
		if p.ID != a.relay.WorkerID() && p.Name != a.cfg.Name {
			a.log.Warn("another live process on this Redis and key prefix calls itself a different relay: processes sharing a prefix run each other's turns; give each relay its own RELAY_KEY_PREFIX (or Redis database), or the same name",
				"this_relay", a.cfg.Name, "other_relay", p.Name, "other_role", p.Role, "other_host", p.Host, "other_pid", p.PID, "key_prefix", a.st.Prefix())
		}
	}
	if err := a.st.AnnounceProc(ctx, a.proc()); err != nil {
		a.log.Warn("announce this process", "err", err)
	}
}

// PublicURL is the base URL handed to agents (RELAY_URL, RELAY_MCP_URL, the
// MCP config) and printed at start (R18.10): --public-url, else the listen
// address with an unspecified host (0.0.0.0, ::) shown as 127.0.0.1.
func (a *App) PublicURL() string {
	if a.cfg.PublicURL != "" {
		return strings.TrimRight(a.cfg.PublicURL, "/")
	}
	return "http://" + publicHostPort(a.addr)
}

// publicHostPort replaces an unspecified listen host by 127.0.0.1.
func publicHostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// OwnerToken is the owner token in force (after Started): the configured one,
// or the one generated at this start; "" when an earlier start generated it
// (only its hash is stored, R18.19).
func (a *App) OwnerToken() string { return a.ownerToken }

func (a *App) ready(ctx context.Context) error {
	a.mu.Lock()
	d := a.draining
	a.mu.Unlock()
	if d {
		return errors.New("shutting down")
	}
	if err := a.st.Ping(ctx); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// gcPercent is the Go collector's target a relay process runs with unless
// the environment sets GOGC: a relay's live heap is small (sessions live in
// Redis; 7.5 MiB in the benchmark) while each MCP call allocates much (the MCP
// SDK's decoding), and GC work per call falls with the target. In A/B runs
// of the benchmark each doubling took CPU off a send→reply: 5–10% from 100 to
// 200, 10–15% from 200 to 400, 3–12% from 400 to 800. The heap then peaks at nine times the
// live heap, so a soft memory limit (gcMemoryLimit, unless GOMEMLIMIT is set)
// makes the collector work harder before a large live heap grows that far
// (docs/OPERATIONS.md).
const gcPercent = 800

// gcMemoryLimit is the soft memory limit a relay process runs with unless the
// environment sets GOMEMLIMIT.
const gcMemoryLimit = 512 << 20

var gcOnce sync.Once

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(gcMemoryLimit)
	}
}

// Close frees what New took (the Redis clients, the embedded store and its
// data directory) for an App that is not run; Run does it itself.
func (a *App) Close() { a.close() }

func (a *App) close() {
	defer a.closeTraces()
	if a.hooks != nil {
		a.hooks.Close() // deliveries under way end; the relay's work is done
	}
	_ = a.aq.Close()
	_ = a.insp.Close()
	_ = a.rdb.Close()
	if a.emb != nil {
		// After every client of it closed: its last checkpoint then has
		// every write (a clean stop loses nothing, R20.1).
		if err := a.emb.Close(); err != nil {
			a.log.Error("embedded store: close", "err", err)
		}
	}
}

// closeTraces sends the spans still buffered and ends the exporter (R25.1).
func (a *App) closeTraces() {
	if a.endTraces == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.endTraces(ctx); err != nil {
		a.log.Warn("OpenTelemetry: send the last spans", "err", err)
	}
	a.endTraces = nil
}

var redisLogOnce sync.Once

// redisLogger sends go-redis's internal messages (reconnect attempts) to slog at debug level.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}

// redactURL hides a password in a Redis URL for logs and errors.
func redactURL(u string) string {
	if u == "" {
		return "(embedded store)"
	}
	return redisurl.Redact(u)
}
