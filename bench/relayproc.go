package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/app"
	"github.com/oar/relay/domain"
)

// relayProc is one relay process started in this program (app.App on
// 127.0.0.1:0 against the given Redis, with its own key prefix).
type relayProc struct {
	app    *app.App
	url    string
	owner  string
	prefix string
	dir    string
	data   string // the embedded store's data directory (removed at stop), else ""
	hc     *http.Client
	rt     *rtCounter // round trips of the relay's Redis client (API, worker and loops share it)
	cancel context.CancelFunc
	done   chan error
}

// startRelay starts a relay with the scripted provider. concurrency is the
// asynq worker concurrency (0: the relay's default).
func startRelay(redisURL, prefix string, concurrency int, hc *http.Client) (*relayProc, error) {
	return startRelayWith(redisURL, prefix, concurrency, hc, nil)
}

// stop shuts the relay down and waits for it. An embedded store is merged
// into its base file first: the last checkpoint of Close may start a merge
// that Close does not wait for, which would then fail on the removed data
// directory; after a merge that checkpoint is too small to start one.
func (p *relayProc) stop() error {
	if e := p.app.Embedded(); e != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := e.Checkpoint(ctx); err == nil {
			_ = e.Compact()
		}
		cancel()
	}
	p.cancel()
	defer func() {
		_ = os.RemoveAll(p.dir)
		if p.data != "" {
			_ = os.RemoveAll(p.data)
		}
	}()
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("relay did not stop within 30 s")
	}
}

// ownerCall sends an owner API request and decodes the JSON answer into out.
func (p *relayProc) ownerCall(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+p.owner)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %.200q: %w", method, path, data, err)
		}
	}
	return resp.StatusCode, nil
}

// enableAgentSessions is PATCH /api/v1/settings {"agent_sessions": true}.
func (p *relayProc) enableAgentSessions(ctx context.Context) error {
	var out map[string]any
	st, err := p.ownerCall(ctx, http.MethodPatch, "/api/v1/settings", map[string]any{"agent_sessions": true}, &out)
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("PATCH /api/v1/settings: status %d: %v", st, out)
	}
	return nil
}

type sessionRef struct {
	ID    string
	Token string
}

// createSession is POST /api/v1/sessions.
func (p *relayProc) createSession(ctx context.Context, title string) (sessionRef, error) {
	var out map[string]any
	st, err := p.ownerCall(ctx, http.MethodPost, "/api/v1/sessions", map[string]any{"title": title}, &out)
	if err != nil {
		return sessionRef{}, err
	}
	if st != http.StatusCreated {
		return sessionRef{}, fmt.Errorf("POST /api/v1/sessions: status %d: %v", st, out)
	}
	id, _ := out["id"].(string)
	tok, _ := out["token"].(string)
	if id == "" || tok == "" {
		return sessionRef{}, fmt.Errorf("POST /api/v1/sessions: no id or token in %v", out)
	}
	return sessionRef{ID: id, Token: tok}, nil
}

// createSessions creates n sessions in-process through the domain (the same
// path as POST /api/v1/sessions without HTTP), with workers goroutines.
func (p *relayProc) createSessions(ctx context.Context, n, workers int, title string) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := p.app.Relay().OwnerCreateSession(ctx, domain.NewSession{Title: fmt.Sprintf("%s %05d", title, i)})
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// workerConfig reads the relay worker's asynq concurrency, queues (with
// their weights) and strict priority from the server info asynq keeps in
// Redis (the server that serves queue).
func workerConfig(ctx context.Context, rdb redis.UniversalClient, queue string) (*asynq.ServerInfo, error) {
	insp := asynq.NewInspectorFromRedisClient(rdb) // shared client: not closed here
	deadline := time.Now().Add(10 * time.Second)
	for {
		servers, err := insp.Servers()
		if err == nil {
			for _, s := range servers {
				if _, ok := s.Queues[queue]; ok {
					return s, nil
				}
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("no asynq server for queue %s found in Redis: %w", queue, err)
			}
			return nil, fmt.Errorf("no asynq server for queue %s found in Redis", queue)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
