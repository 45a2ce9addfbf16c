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
	"net/http"
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
	"github.com/oar/relay/scheduler"
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
	tuning := redisurl.Tuning{DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
		MaxRetries: 1, PoolSize: 64}
	var ru *redisurl.URL
	if cfg.RedisURL == "" {
		// R20: the embedded store on a loopback port of its own (no
		// fixed-size pipe: pipelines and scripts of any size), kept in the
		// data directory. A directory in use or a file that cannot be read
		// stops the start here, touching nothing.
		emb, err := embedded.Open(embedded.Options{Dir: cfg.DataDir, Logger: a.log, Every: o.EmbeddedEvery})
		if err != nil {
			return nil, err
		}
		a.emb = emb
		ru = &redisurl.URL{Kind: redisurl.Single, Simple: &redis.Options{Addr: emb.Addr(), Password: emb.Password()}}
		a.log.Info("Redis: the embedded store (no --redis / REDIS_URL), kept in the data directory; one process only: set REDIS_URL for a real Redis and several workers",
			"data_dir", emb.Dir())
	} else {
		u, err := redisurl.Parse(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		if cfg.RedisPassword != "" { // read from RELAY_REDIS_PASSWORD_FILE (R18.36)
			u.SetPassword(cfg.RedisPassword)
		}
		ru = u
	}
	ru.Tune(tuning)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{slog.Default()}) }) // a global of go-redis: set once
	a.rdb = ru.NewClient()
	a.rdb.AddHook(store.UnreachableHook()) // R25.3: the store's silence, told apart from any other
	a.st = store.New(a.rdb, o.KeyPrefix)
	a.queues = jobs.QueuesFor(o.KeyPrefix)
	a.aq = asynq.NewClientFromRedisClient(a.rdb)
	a.insp = asynq.NewInspectorFromRedisClient(a.rdb)
	// R25.1: traces when an OTLP endpoint is set, else nothing at all (the
	// global no-op tracer provider, no exporter, no instrumentation).
	if a.tracing, a.endTraces, err = otelx.Setup(context.Background(), cfg.Name); err != nil {
		a.close()
		return nil, err
	}
	if a.tracing {
		if err := otelx.Redis(a.rdb); err != nil { // the store's commands, inside a trace
			a.close()
			return nil, err
		}
		a.log.Info("OpenTelemetry traces on", "protocol", otelx.Protocol())
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
	a.clock = time.Now
	if o.Clock != nil {
		a.clock = o.Clock.Now
	}
	a.relay = domain.New(a.st, asynqjobs.NewClient(a.aq, a.insp, a.queues), provs, ropt)
	wo := worker.Options{Queues: a.queues, Concurrency: o.Concurrency, Logger: a.log}
	if a.emb != nil {
		wo.IdleCheck = worker.EmbeddedIdleCheck // one process: every enqueue goes through its waker
	}
	a.work = worker.New(a.rdb, a.relay, wo)
	a.met.AddQueues(a.queueStats)
	a.met.AddGauge("relay_cards_pending", "Approval cards waiting for the owner.", func() float64 {
		c, _, _ := a.counts()
		return float64(c)
	})
	a.met.AddGauge("relay_sessions_active", "Sessions that are not archived.", func() float64 {
		_, s, _ := a.counts()
		return float64(s)
	})
	a.met.AddGauge("relay_paired_relays_offline", "Paired relays whose last hello, call or poll got no answer (or a rejected token).", func() float64 {
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
	})
	a.met.AddGauge("relay_events_held", "Events held by digests and quiet hours.", func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, _ := a.st.HeldTotal(ctx)
		return float64(n)
	})
	return a, nil
}

func buildProviders(cfg config.Config, log *slog.Logger, sbs sandboxes, us users) ([]provider.Provider, *provider.Scripted, error) {
	var out []provider.Provider
	var scripted *provider.Scripted
	for _, p := range cfg.Providers {
		switch p.Type {
		case config.TypeScripted:
			scripted = provider.NewScripted(provider.Info{ID: p.ID, Name: p.Name, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo})
			out = append(out, scripted)
		case config.TypeExec:
			out = append(out, provider.NewExec(provider.ExecConfig{ID: p.ID, Name: p.Name, Command: p.Command, Models: p.Models,
				DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Env: p.Env, Sandbox: sbs[p.ID], User: us[p.ID]}))
		case config.TypeClaudeCode, config.TypeCodex, config.TypeGeminiCLI: // R17.1
			cli, err := provider.NewCLI(provider.CLIConfig{ID: p.ID, Name: p.Name, Type: p.Type, Command: p.Command, Args: p.Args,
				Env: p.Env, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo,
				Silence: cfg.Timing.AgentSilence, Sandbox: sbs[p.ID], User: us[p.ID]})
			if err != nil {
				return nil, nil, fmt.Errorf("config: %w", err)
			}
			if in := cli.Info(); in.Status == provider.StatusUnavailable {
				log.Warn("provider unavailable: prompts to it are refused until its command can be found", "provider", p.ID, "why", in.StatusReason)
			}
			out = append(out, cli)
		case config.TypeACP: // R22.1
			ap := provider.NewACP(provider.ACPConfig{ID: p.ID, Name: p.Name, Command: p.Command, Env: p.Env, Models: p.Models,
				DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Silence: cfg.Timing.AgentSilence,
				Idle: cfg.Timing.ACPIdle, Logger: log, Sandbox: sbs[p.ID], User: us[p.ID]})
			if in := ap.Info(); in.Status == provider.StatusUnavailable {
				log.Warn("provider unavailable: prompts to it are refused until its command can be found", "provider", p.ID, "why", in.StatusReason)
			}
			out = append(out, ap)
		case config.TypeOpenAI:
			name, desc, schema := api.RelayToolForModels()
			out = append(out, provider.NewOpenAI(provider.OpenAIConfig{ID: p.ID, Name: p.Name, BaseURL: p.BaseURL, APIKeyEnv: p.APIKeyEnv,
				Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, MaxSteps: p.MaxSteps,
				SystemPrompt: p.SystemPrompt, ToolName: name, ToolDescription: desc, ToolSchema: schema, Logger: log}))
		}
	}
	if scripted == nil {
		scripted = provider.NewScripted(provider.Info{})
		out = append(out, scripted)
	}
	return out, scripted, nil
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

// Run serves until ctx ends, then shuts down in order: readiness off, stop
// accepting, hand running turns back to the queue, close Redis.
func (a *App) Run(ctx context.Context) (err error) {
	defer a.close()
	gcOnce.Do(tuneGC)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = a.st.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("redis %s: %w", redactURL(a.cfg.RedisURL), err)
	}
	if err := a.upgradeKeys(ctx); err != nil {
		return err
	}
	hubCtx, stopHub := context.WithCancel(context.Background())
	defer func() { stopHub(); a.relay.Wait() }() // the notification listener and cache watcher are joined
	if err := a.relay.Start(hubCtx); err != nil {
		return err
	}
	var srv *http.Server
	var ln net.Listener
	var serveErr = make(chan error, 1)
	switch a.opts.Mode {
	case ModeServe:
		ln, err = net.Listen("tcp", a.cfg.Addr)
		if err != nil {
			return &ListenError{Flag: "--addr", Addr: a.cfg.Addr, Err: err}
		}
		if err := a.setupOwnerToken(ctx); err != nil {
			_ = ln.Close()
			return err
		}
		a.addr = ln.Addr().String()
		a.relay.SetBaseURL(a.PublicURL())
		if err := a.st.SetAPIURL(ctx, a.PublicURL()); err != nil {
			return err
		}
		mcpOpts := a.opts.MCP
		mcpOpts.Version = Version
		if mcpOpts.Logger == nil {
			mcpOpts.Logger = a.log
		}
		// R18.23: failed tokens count over a minute of this process's clock
		// (a test's faster clock makes it shorter).
		authWindow := time.Minute
		if a.opts.Clock != nil && a.opts.Clock.Factor > 1 {
			authWindow = time.Duration(float64(time.Minute) / a.opts.Clock.Factor)
		}
		h := api.NewRouter(api.Options{Relay: a.relay, Store: a.st, Metrics: a.met, OwnerToken: a.ownerToken, OwnerTokenHash: a.ownerTokenHash, Ready: a.ready, MCP: mcpOpts, Logger: a.log,
			PublicURL: a.PublicURL(), AuthWindow: authWindow})
		// R18.18: bounded headers, idle connections closed, at most
		// api.MaxConns connections (the least recently busy idle one closed
		// for a new one), so a flood cannot stop /healthz or the owner API.
		if a.tracing { // the HTTP server span, continuing a paired relay's trace (R25.1)
			h = otelx.Handler(h)
		}
		srv = api.NewServer(h)
	case ModeWorker:
		if a.cfg.MetricsAddr != "" {
			ln, err = net.Listen("tcp", a.cfg.MetricsAddr)
			if err != nil {
				return &ListenError{Flag: "--metrics-addr", Addr: a.cfg.MetricsAddr, Err: err}
			}
			a.addr = ln.Addr().String()
			// The same bounds as relay serve's (R18.18, R18.29: a body, which
			// no health route takes, is given BodyTimeout before it is cut).
			srv = api.NewServer(api.NewHealthRouter(a.ready, a.met))
		}
	default:
		return fmt.Errorf("unknown mode %q", a.opts.Mode)
	}
	if err := a.work.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	loops, stopLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Schedules: every active one has its pending occurrence task (a missed time fires once, R9.3).
	// R18.11: MCP config files (they hold session tokens) that a relay process
	// which died mid-turn left behind.
	cleaned := map[string]bool{}
	for _, p := range a.provs {
		if d, ok := p.(interface{ MCPConfigDir() string }); ok && !cleaned[d.MCPConfigDir()] {
			cleaned[d.MCPConfigDir()] = true
			if n, err := provider.CleanStaleMCPConfigs(d.MCPConfigDir()); err != nil {
				a.log.Warn("remove stale MCP config files", "dir", d.MCPConfigDir(), "err", err)
			} else if n > 0 {
				a.log.Info("removed stale MCP config files of relay processes that died", "dir", d.MCPConfigDir(), "files", n)
			}
		}
	}
	// Drain flags written before the drains index existed (one scan at start).
	if _, err := a.st.IndexDrainFlags(ctx); err != nil {
		a.log.Warn("index drain flags", "err", err)
	}
	if err := a.relay.RecoverSchedules(ctx); err != nil {
		a.log.Warn("recover schedules", "err", err)
	}
	for _, p := range a.provs {
		if o, ok := p.(*provider.OpenAI); ok { // model discovery, R17.6
			wg.Add(1)
			go func() { defer wg.Done(); o.Discovery(loops) }()
		}
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		scheduler.Every(loops, time.Minute, a.log, "schedule-recovery", a.relay.RecoverSchedules)
	}()
	go func() {
		defer wg.Done()
		enq := asynqjobs.NewClient(a.aq, a.insp, a.queues)
		scheduler.Every(loops, a.opts.StallScanEvery, a.log, "stall-scan", func(ctx context.Context) error {
			// One scan per clock minute across all processes: the task id dedupes.
			minute := a.clock().Truncate(time.Minute).Unix()
			return enq.Enqueue(ctx, jobs.TypeStallScan, struct{}{}, fmt.Sprintf("stall:%d", minute), time.Time{})
		})
	}()
	go func() {
		defer wg.Done()
		stale := &scheduler.Stale{}
		scheduler.Every(loops, a.opts.SweepEvery, a.log, "drain-sweep", func(ctx context.Context) error {
			_, err := a.relay.RecoverDrains(ctx, stale.Filter)
			return err
		})
	}()
	if srv != nil {
		go func() { serveErr <- srv.Serve(ln) }()
		if a.opts.Mode == ModeServe {
			pub := a.PublicURL()
			a.log.Info("relay serving", "name", a.cfg.Name, "listen", a.addr, "url", pub, "console", pub+"/", "mcp", pub+"/mcp", "owner_api", pub+"/api/v1")
		}
	}
	wg.Add(1)
	go func() { // R25.3: "store reachable again" once it answers
		defer wg.Done()
		a.health.Watch(loops, time.Second, func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() })
	}()
	// R18.9: what this process is, where its Redis is, what it works on.
	conc := a.opts.Concurrency
	if conc <= 0 {
		conc = worker.DefaultConcurrency
	}
	a.announce(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		scheduler.Every(loops, procBeat, a.log, "process-announce", func(ctx context.Context) error {
			return a.st.AnnounceProc(ctx, a.proc())
		})
	}()
	where := []any{"redis", redactURL(a.cfg.RedisURL)}
	if a.emb != nil {
		where = append(where, "data_dir", a.emb.Dir()) // R20.1: where the data lives
	}
	a.log.Info("relay process started", append([]any{"role", a.opts.Mode, "name", a.cfg.Name, "version", Version},
		append(where, "key_prefix", a.st.Prefix(), "queues", strings.Join(a.queues.All(), ","),
			"concurrency", conc, "worker_id", a.relay.WorkerID())...)...)
	close(a.started)
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("http server: %w", err)
	}
	a.log.Info("shutting down")
	a.mu.Lock()
	a.draining = true
	a.mu.Unlock()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), a.opts.ShutdownGrace)
		if serr := srv.Shutdown(sctx); serr != nil {
			_ = srv.Close()
		}
		cancel()
	}
	a.work.Shutdown()
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = a.st.RemoveProc(rctx, a.relay.WorkerID())
	rcancel()
	a.scripted.Close()
	for _, p := range a.provs {
		if c, ok := p.(interface{ Close() }); ok && p != provider.Provider(a.scripted) {
			c.Close() // the ACP agents' kept processes
		}
	}
	stopLoops()
	wg.Wait()
	a.log.Info("stopped")
	return err
}

func (a *App) setupOwnerToken(ctx context.Context) error {
	want := a.cfg.OwnerToken
	if want != "" {
		a.ownerToken, a.ownerTokenHash = want, store.TokenHash(want)
		return nil
	}
	// R18.19: only the generated token's hash is stored; the token itself is
	// known only to the process that made it, which shows it once.
	tok := store.NewID(24)
	hash, created, err := a.st.OwnerToken(ctx, tok)
	if err != nil {
		return fmt.Errorf("owner token: %w", err)
	}
	a.ownerTokenHash = hash
	if created {
		a.ownerToken = tok
		a.log.Warn("generated an owner token (shown once; keep it): use it as Authorization: Bearer for the owner API",
			"owner_token", tok, "owner_api", "http://"+a.cfg.Addr+"/api/v1")
	}
	return nil
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
// upgradeKeys moves a dataset of the key format before one hash slot per
// relay (PREFIX:… keys, the queues PREFIX:turns and PREFIX:events) to
// {PREFIX}:… and the queues of jobs.QueuesFor, once (the marker
// {PREFIX}:keyfmt), before anything is served. One process does it under a
// lock; another starting meanwhile waits for the marker.
func (a *App) upgradeKeys(ctx context.Context) error {
	if done, err := a.st.KeyFormatDone(ctx); err != nil || done {
		return err
	}
	got, err := a.st.TryLock(ctx, "keyfmt", 10*time.Minute)
	if err != nil {
		return err
	}
	if !got {
		a.log.Info("another process is moving the keys to the current format: waiting")
		return a.st.WaitKeyFormat(ctx, 10*time.Minute)
	}
	defer func() { _ = a.st.ReleaseLock(context.Background(), "keyfmt") }()
	tasks, err := asynqjobs.MoveOldQueues(a.insp, a.aq, a.st.Prefix())
	if err != nil {
		return fmt.Errorf("move the tasks of the old queues: %w", err)
	}
	keys, err := a.st.UpgradeKeyTags(ctx)
	if err != nil {
		return err
	}
	if keys > 0 || tasks > 0 {
		a.log.Info("dataset upgraded to one hash slot per relay: keys renamed to {PREFIX}:…, tasks moved to the new queues",
			"key_prefix", a.st.Prefix(), "keys", keys, "tasks", tasks, "queues", strings.Join(a.queues.All(), ","))
	}
	return nil
}

func redactURL(u string) string {
	if u == "" {
		return "(embedded store)"
	}
	return redisurl.Redact(u)
}
