package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay/api"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/jobs/asynqjobs"
	"github.com/oar/relay/otelx"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/scheduler"
	"github.com/oar/relay/store"
	"github.com/oar/relay/worker"
)

// Run serves until ctx ends, then shuts down in order: readiness off, stop
// accepting, hand running turns back to the queue, close Redis.
func (a *App) Run(ctx context.Context) (err error) {
	defer a.close()
	gcOnce.Do(tuneGC)
	if err := a.connect(ctx); err != nil {
		return err
	}
	hubCtx, stopHub := context.WithCancel(context.Background())
	defer func() { stopHub(); a.relay.Wait() }() // the notification listener and cache watcher are joined
	if err := a.relay.Start(hubCtx); err != nil {
		return err
	}
	srv, ln, err := a.listen(ctx)
	if err != nil {
		return err
	}
	if err := a.work.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	loops, stopLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	a.cleanStaleMCPConfigs()
	a.recoverAtStart(ctx)
	a.startLoops(loops, &wg)
	serveErr := make(chan error, 1)
	if srv != nil {
		go func() { serveErr <- srv.Serve(ln) }()
		if a.opts.Mode == ModeServe {
			pub := a.PublicURL()
			a.log.Info("relay serving", "name", a.cfg.Name, "listen", a.addr, "url", pub, "console", pub+"/", "mcp", pub+"/mcp", "owner_api", pub+"/api/v1")
		}
	}
	a.startWatchers(ctx, loops, &wg)
	a.logStarted()
	close(a.started)
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("http server: %w", err)
	}
	a.shutdown(srv)
	stopLoops()
	wg.Wait()
	a.log.Info("stopped")
	return err
}

// connect checks that Redis answers and moves an old dataset to the current
// key format.
func (a *App) connect(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := a.st.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("redis %s: %w", redactURL(a.cfg.RedisURL), err)
	}
	return a.upgradeKeys(ctx)
}

// listen opens the process's listener and its HTTP server: the API in serve
// mode, the health routes on --metrics-addr in worker mode (none without it:
// a nil server).
func (a *App) listen(ctx context.Context) (*http.Server, net.Listener, error) {
	switch a.opts.Mode {
	case ModeServe:
		return a.listenAPI(ctx)
	case ModeWorker:
		if a.cfg.MetricsAddr == "" {
			return nil, nil, nil
		}
		ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
		if err != nil {
			return nil, nil, &ListenError{Flag: "--metrics-addr", Addr: a.cfg.MetricsAddr, Err: err}
		}
		a.addr = ln.Addr().String()
		// The same bounds as relay serve's (R18.18, R18.29: a body, which
		// no health route takes, is given BodyTimeout before it is cut).
		return api.NewServer(api.NewHealthRouter(a.ready, a.met)), ln, nil
	default:
		return nil, nil, fmt.Errorf("unknown mode %q", a.opts.Mode)
	}
}

// listenAPI listens on --addr, settles the owner token and the public URL,
// and builds the API's server.
func (a *App) listenAPI(ctx context.Context) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return nil, nil, &ListenError{Flag: "--addr", Addr: a.cfg.Addr, Err: err}
	}
	if err := a.setupOwnerToken(ctx); err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	a.addr = ln.Addr().String()
	a.relay.SetBaseURL(a.PublicURL())
	if err := a.st.SetAPIURL(ctx, a.PublicURL()); err != nil {
		return nil, nil, err
	}
	return api.NewServer(a.apiHandler()), ln, nil
}

// apiHandler is the API's router. api.NewServer bounds it (R18.18: bounded
// headers, idle connections closed, at most api.MaxConns connections, the
// least recently busy idle one closed for a new one), so a flood cannot stop
// /healthz or the owner API.
func (a *App) apiHandler() http.Handler {
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
	if a.tracing { // the HTTP server span, continuing a paired relay's trace (R25.1)
		h = otelx.Handler(h)
	}
	return h
}

// cleanStaleMCPConfigs removes the MCP config files (they hold session
// tokens) that a relay process which died mid-turn left behind (R18.11).
func (a *App) cleanStaleMCPConfigs() {
	cleaned := map[string]bool{}
	for _, p := range a.provs {
		d, ok := p.(interface{ MCPConfigDir() string })
		if !ok || cleaned[d.MCPConfigDir()] {
			continue
		}
		cleaned[d.MCPConfigDir()] = true
		if n, err := provider.CleanStaleMCPConfigs(d.MCPConfigDir()); err != nil {
			a.log.Warn("remove stale MCP config files", "dir", d.MCPConfigDir(), "err", err)
		} else if n > 0 {
			a.log.Info("removed stale MCP config files of relay processes that died", "dir", d.MCPConfigDir(), "files", n)
		}
	}
}

// recoverAtStart indexes the drain flags written before the drains index
// existed (one scan at start) and gives every active schedule its pending
// occurrence task (a missed time fires once, R9.3).
func (a *App) recoverAtStart(ctx context.Context) {
	if _, err := a.st.IndexDrainFlags(ctx); err != nil {
		a.log.Warn("index drain flags", "err", err)
	}
	if err := a.relay.RecoverSchedules(ctx); err != nil {
		a.log.Warn("recover schedules", "err", err)
	}
}

// startLoops starts the time loops until loops ends: the OpenAI providers'
// model discovery (R17.6), schedule recovery, the stall scan and the
// lost-drain sweep (R18.11).
func (a *App) startLoops(loops context.Context, wg *sync.WaitGroup) {
	for _, p := range a.provs {
		if o, ok := p.(*provider.OpenAI); ok { // model discovery, R17.6
			wg.Go(func() { o.Discovery(loops) })
		}
	}
	wg.Go(func() {
		scheduler.Every(loops, time.Minute, a.log, "schedule-recovery", a.relay.RecoverSchedules)
	})
	wg.Go(func() {
		enq := asynqjobs.NewClient(a.aq, a.insp, a.queues)
		scheduler.Every(loops, a.opts.StallScanEvery, a.log, "stall-scan", func(ctx context.Context) error {
			// One scan per clock minute across all processes: the task id dedupes.
			minute := a.clock().Truncate(time.Minute).Unix()
			return enq.Enqueue(ctx, jobs.TypeStallScan, struct{}{}, fmt.Sprintf("stall:%d", minute), time.Time{})
		})
	})
	wg.Go(func() {
		stale := &scheduler.Stale{}
		scheduler.Every(loops, a.opts.SweepEvery, a.log, "drain-sweep", func(ctx context.Context) error {
			_, err := a.relay.RecoverDrains(ctx, stale.Filter)
			return err
		})
	})
}

// startWatchers starts watching the store's health (R25.3: "store reachable
// again" once it answers) and announces this process, then again every
// procBeat until loops ends.
func (a *App) startWatchers(ctx, loops context.Context, wg *sync.WaitGroup) {
	wg.Go(func() {
		a.health.Watch(loops, time.Second, func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() })
	})
	a.announce(ctx)
	wg.Go(func() {
		scheduler.Every(loops, procBeat, a.log, "process-announce", func(ctx context.Context) error {
			return a.st.AnnounceProc(ctx, a.proc())
		})
	})
}

// logStarted says what this process is, where its Redis is and what it
// works on (R18.9).
func (a *App) logStarted() {
	conc := a.opts.Concurrency
	if conc <= 0 {
		conc = worker.DefaultConcurrency
	}
	where := []any{"redis", redactURL(a.cfg.RedisURL)}
	if a.emb != nil {
		where = append(where, "data_dir", a.emb.Dir()) // R20.1: where the data lives
	}
	a.log.Info("relay process started", append([]any{"role", a.opts.Mode, "name", a.cfg.Name, "version", Version},
		append(where, "key_prefix", a.st.Prefix(), "queues", strings.Join(a.queues.All(), ","),
			"concurrency", conc, "worker_id", a.relay.WorkerID())...)...)
}

// shutdown stops the process's work in order: readiness off, the HTTP server
// (in-flight requests get ShutdownGrace), the worker (running turns go back
// to the queue), this process's entry, the providers' kept processes.
func (a *App) shutdown(srv *http.Server) {
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
