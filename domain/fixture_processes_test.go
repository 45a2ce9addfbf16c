package domain

// Fixture helpers of the rule suites moved down from relaytest in issue 24
// step 3, third round (hardening, owner routes, resume, peer tokens).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// r3List is v as a JSON list; anything else fails the test.
func r3List(t testing.TB, v any, what string) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: want a list, got %T %v", what, v, v)
	}
	return l
}

// r3PeerCall is a paired relay's POST /peer/v1/call with tok on e, as the
// conversation session of relay (origin as relaytest's peerCall sent it);
// anything but 200 fails the test.
func (e *peerEnd) r3PeerCall(tok, relay, session, action string, args map[string]any) map[string]any {
	e.t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	st, env := e.peerStatus("/peer/v1/call", tok, map[string]any{"action": action, "args": args,
		"origin": map[string]any{"relay": relay, "session": session, "title": "t", "model": "m", "path": []string{relay}}})
	if st != http.StatusOK {
		e.t.Fatalf("peer call %s as %s: %d %v", action, relay, st, env)
	}
	return env
}

// r3Eventually checks cond every few milliseconds until it holds, failing
// the test after within (something the relay does with no notification,
// like a turn token revoked once the turn's outcome is written, or a file
// an agent process writes).
func r3Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, within, 5*time.Millisecond, cond, "%s: not within %s", what, within)
}

// r3PlainIn lists every key of the fixture's prefix that holds one of toks
// in its name or value, whatever its type.
func (f *fixture) r3PlainIn(toks ...string) []string {
	f.t.Helper()
	rdb := f.st.Redis()
	var found []string
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(f.ctx, cursor, store.KeyBase(f.st.Prefix())+"*", 500).Result()
		if err != nil {
			f.t.Fatal(err)
		}
		for _, k := range keys {
			var b strings.Builder
			switch rdb.Type(f.ctx, k).Val() {
			case "string":
				b.WriteString(rdb.Get(f.ctx, k).Val())
			case "hash":
				for hf, v := range rdb.HGetAll(f.ctx, k).Val() {
					b.WriteString(hf + "=" + v + "\n")
				}
			case "list":
				b.WriteString(strings.Join(rdb.LRange(f.ctx, k, 0, -1).Val(), "\n"))
			case "set":
				b.WriteString(strings.Join(rdb.SMembers(f.ctx, k).Val(), "\n"))
			case "zset":
				b.WriteString(strings.Join(rdb.ZRange(f.ctx, k, 0, -1).Val(), "\n"))
			case "stream":
				for _, m := range rdb.XRange(f.ctx, k, "-", "+").Val() {
					b.WriteString(fmt.Sprint(m.Values) + "\n")
				}
			}
			for _, tok := range toks {
				if strings.Contains(k, tok) || strings.Contains(b.String(), tok) {
					found = append(found, k)
				}
			}
		}
		if cursor = next; cursor == 0 {
			return found
		}
	}
}

// r3Process builds and starts another Relay on f's store, enqueuer and
// clocks (the work clock too when f has one), as fo configures it (a second
// process of the same relay: its own worker id and caches); it ends with the
// test.
func (f *fixture) r3Process(fo fixtureOptions) *Relay {
	f.t.Helper()
	cfg := fo.config()
	ctx, cancel := context.WithCancel(context.Background())
	p := provider.NewScripted(provider.Info{})
	var timers clock.Clock = clock.Real{}
	if f.work != nil {
		timers = f.work
	}
	r := New(f.st, f.enq, []provider.Provider{p}, Options{
		Name: f.r.opts.Name, Version: "test", Folders: f.r.opts.Folders,
		Settings: cfg.Settings, Timing: cfg.Timing, Limits: cfg.Limits, Clock: f.clk, Timers: timers,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := r.Start(ctx); err != nil {
		cancel()
		p.Close()
		f.t.Fatalf("start a second process: %v", err)
	}
	f.t.Cleanup(func() {
		cancel()
		r.Shutdown()
		r.Wait()
		p.Close()
	})
	return r
}

// r3Parallel makes n relay_tool calls at once, call i as caller on
// procs[i%len(procs)] with args(i), and counts the result codes ("ok" on
// success).
func r3Parallel(t testing.TB, ctx context.Context, procs []*Relay, caller string, n int, args func(i int) map[string]any) map[string]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			raw, err := json.Marshal(args(i))
			code := ""
			if err == nil {
				<-start
				out, _ := procs[i%len(procs)].CallTool(ctx, caller, raw, nil)
				var env map[string]any
				if err = json.Unmarshal(out, &env); err == nil {
					if env["ok"] == true {
						code = "ok"
					} else {
						code, _ = env["code"].(string)
					}
				}
			}
			if err != nil {
				code = "error: " + err.Error()
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}(i)
	}
	close(start)
	wg.Wait()
	return codes
}
