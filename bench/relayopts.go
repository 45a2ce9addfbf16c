package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/app"
	"github.com/oar/relay/config"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/store"
)

// benchConfig is the configuration of a bench relay named "bench" on
// redisURL with folder dir: the scripted provider, loop protection out of
// the way (a client sends far more than 30 prompts).
func benchConfig(redisURL, dir string) config.Config {
	cfg := config.Default()
	cfg.Name = "bench"
	cfg.Addr = "127.0.0.1:0"
	cfg.RedisURL = redisURL
	cfg.Folders = []string{dir}
	cfg.DefaultCwd = dir
	cfg.OwnerToken = "bench-owner-" + store.NewID(12)
	cfg.Providers = []config.Provider{config.ScriptedProvider()}
	cfg.Limits.AgentPromptsBeforeCard = 1 << 30
	return cfg
}

// startRelayWith starts a relay like startRelay does (scripted provider,
// 127.0.0.1:0, its own key prefix, agent prompts before a card raised), with
// the config adjusted by adjust and extra go-redis hooks on its client (added
// before Run, while nothing uses the client yet).
func startRelayWith(redisURL, prefix string, concurrency int, hc *http.Client, adjust func(*config.Config), hooks ...redis.Hook) (*relayProc, error) {
	return startRelayApp(redisURL, prefix, concurrency, hc, adjust, nil, hooks...)
}

// startRelayApp is startRelayWith with the process options adjusted by
// adjustApp too.
func startRelayApp(redisURL, prefix string, concurrency int, hc *http.Client, adjust func(*config.Config), adjustApp func(*app.Options), hooks ...redis.Hook) (*relayProc, error) {
	dir, err := os.MkdirTemp("", "relay-bench-")
	if err != nil {
		return nil, err
	}
	cfg := benchConfig(redisURL, dir)
	if adjust != nil {
		adjust(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	aopts := app.Options{KeyPrefix: prefix, Logger: logger, Concurrency: concurrency, ShutdownGrace: 2 * time.Second}
	if adjustApp != nil {
		adjustApp(&aopts)
	}
	a, err := app.New(cfg, aopts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	rt := &rtCounter{}
	a.Redis().AddHook(rt)
	for _, h := range hooks {
		a.Redis().AddHook(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &relayProc{app: a, owner: cfg.OwnerToken, prefix: prefix, dir: dir, hc: hc, rt: rt, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- a.Run(ctx) }()
	select {
	case <-a.Started():
	case err := <-p.done:
		cancel()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("relay did not start: %w", err)
	case <-time.After(20 * time.Second):
		cancel()
		return nil, errors.New("relay did not start within 20 s")
	}
	p.url = a.URL()
	return p, nil
}

// newSessions creates n sessions in-process through the domain (the owner
// API's path without HTTP) with workers goroutines and returns their ids in
// order; title(i) names session i.
func newSessions(ctx context.Context, r *domain.Relay, n, workers int, title func(int) string) ([]string, error) {
	ids := make([]string, n)
	err := parallel(ctx, n, workers, func(i int) error {
		m, err := r.OwnerCreateSession(ctx, domain.NewSession{Title: title(i)})
		if err != nil {
			return err
		}
		id := m.ID
		if id == "" {
			return fmt.Errorf("create session: no id in %v", m)
		}
		ids[i] = id
		return nil
	})
	return ids, err
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error
// (it stops handing out work after one).
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  atomic.Int64
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				mu.Lock()
				failed := first != nil
				mu.Unlock()
				if failed {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// ctxCounter is a go-redis hook that counts the round trips made with a
// context carrying its tag (tagged), whichever goroutine makes them: the
// Redis cost of one in-process domain call, undisturbed by the worker, the
// loops and the turns running beside it.
type ctxCounter struct{ n atomic.Int64 }

type ctxTagKey struct{}

func (c *ctxCounter) tagged(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxTagKey{}, c)
}

func (c *ctxCounter) count(ctx context.Context) {
	if ctx.Value(ctxTagKey{}) == c {
		c.n.Add(1)
	}
}

func (c *ctxCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *ctxCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(ctx)
		return next(ctx, cmd)
	}
}

func (c *ctxCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(ctx)
		return next(ctx, cmds)
	}
}

// waitQueuesIdle waits until the relay's asynq queues have nothing pending or
// active (the turns and deliveries a phase started have run), at most d.
func waitQueuesIdle(ctx context.Context, rdb redis.UniversalClient, queues []string, d time.Duration) error {
	return waitQueues(ctx, rdb, queues, d, 50*time.Millisecond, false)
}

// waitQueues waits until the queues hold no pending or active task (with
// delayed, none scheduled or waiting for a retry either), looking every step
// in one round trip.
func waitQueues(ctx context.Context, rdb redis.UniversalClient, queues []string, d, step time.Duration, delayed bool) error {
	deadline := time.Now().Add(d)
	for {
		var cmds []*redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, q := range queues {
				cmds = append(cmds, p.LLen(ctx, "asynq:{"+q+"}:pending"), p.LLen(ctx, "asynq:{"+q+"}:active"))
				if delayed {
					cmds = append(cmds, p.ZCard(ctx, "asynq:{"+q+"}:scheduled"), p.ZCard(ctx, "asynq:{"+q+"}:retry"))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		busy := int64(0)
		for _, c := range cmds {
			busy += c.Val()
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay's queues still hold %d tasks after %s", busy, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
	}
}
