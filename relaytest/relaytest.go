// Package relaytest starts real relays for tests and benchmarks: on
// 127.0.0.1:0, against the Redis in REDIS_URL (each with its own key prefix)
// or, without it, against an in-process Redis-compatible server on loopback.
// With CI=true an unreachable Redis fails the test instead of skipping.
//
// With RELAY_TEST_STORE=embedded every relay runs on the embedded default
// instead (R20.6): no Redis URL, the store kept in a data directory of the
// test's own, one process per directory. Tests that need one Redis shared by
// several live processes call NeedsSharedRedis, which skips them there.
package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/api"
	"github.com/oar/relay/app"
	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
	"github.com/oar/relay/embedded"
	"github.com/oar/relay/internal/testredis"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/store"
)

// OwnerToken is the owner token every test relay uses.
const OwnerToken = "test-owner-token"

// Redis is a Redis server for one test: its URL and a key prefix of its own,
// or (DataDir set, no URL) the embedded default kept in a data directory.
type Redis struct {
	URL    string
	Prefix string
	Mini   *miniredis.Miniredis // nil on a real Redis
	// DataDir is the embedded default's data directory (URL empty): a relay
	// started on this Redis runs the embedded store kept there, so one
	// stopped and started again on it keeps its data, as an owner's does.
	DataDir string
	// Dir is the folder every relay on this Redis and prefix may use: the
	// processes of one relay share their folders (R18.3 checks a session's
	// folder again on whichever process runs its turn).
	Dir string
}

var miniMu sync.Mutex

// StoreEnv is the environment variable that picks the store of the tests'
// relays: "embedded" runs every relay on the embedded default (R20.6).
const StoreEnv = testredis.StoreEnv

// EmbeddedMode says whether the tests run on the embedded default
// (RELAY_TEST_STORE=embedded).
func EmbeddedMode() bool { return testredis.EmbeddedMode() }

// NeedsSharedRedis skips the test on the embedded default (and only there):
// it needs one Redis shared by several live processes or relays at once, one
// it dials itself, or one it stops and starts, and the embedded store is one
// process's own (R20.2: one process per data directory). why says which.
func NeedsSharedRedis(tb testing.TB, why string) {
	tb.Helper()
	if EmbeddedMode() {
		tb.Skipf("%s=embedded: needs a Redis shared by several processes (%s); the embedded default serves one process only (R20.2)", StoreEnv, why)
	}
}

// NewRedis returns the Redis a test uses: the embedded default with
// RELAY_TEST_STORE=embedded (NewEmbedded), else REDIS_URL when set (it must
// answer; with CI=true an unreachable one fails the test), else a fresh
// in-process server on loopback. Keys of the prefix are removed when the
// test ends.
func NewRedis(tb testing.TB) *Redis {
	tb.Helper()
	if EmbeddedMode() {
		return NewEmbedded(tb)
	}
	prefix := "t" + store.NewID(5)
	kind, url := testredis.Pick(tb, "tests")
	if kind == testredis.Local {
		return startMini(tb, prefix)
	}
	testredis.Dial(tb, url, func(ctx context.Context, c redis.UniversalClient) {
		_ = store.DeleteMatching(ctx, c, store.KeyBase(prefix)+"*")
		_ = store.DeleteMatching(ctx, c, "asynq:{"+prefix+"}*")
		for _, q := range jobs.QueuesFor(prefix).All() {
			_ = c.SRem(ctx, "asynq:queues", q).Err()
		}
	})
	return &Redis{URL: url, Prefix: prefix, Dir: tb.TempDir()}
}

// NewEmbedded is always the embedded default, whatever RELAY_TEST_STORE
// says: no URL, a fresh data directory and the default key prefix, as an
// owner's `relay serve` with no Redis. The directory goes when the test ends
// (after its relays stopped).
func NewEmbedded(tb testing.TB) *Redis {
	tb.Helper()
	return &Redis{Prefix: "relay", DataDir: tb.TempDir(), Dir: tb.TempDir()}
}

// NewMiniRedis always starts an in-process server (for tests that stop Redis).
func NewMiniRedis(tb testing.TB) *Redis {
	tb.Helper()
	return startMini(tb, "t"+store.NewID(5))
}

func startMini(tb testing.TB, prefix string) *Redis {
	miniMu.Lock()
	m := miniredis.NewMiniRedis()
	err := m.StartAddr("127.0.0.1:0")
	miniMu.Unlock()
	if err != nil {
		tb.Fatalf("start embedded redis: %v", err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m.FastForward(250 * time.Millisecond)
			}
		}
	}()
	tb.Cleanup(func() {
		close(done)
		<-stopped
		m.Close()
	})
	return &Redis{URL: "redis://" + m.Addr() + "/0", Prefix: prefix, Mini: m, Dir: tb.TempDir()}
}

// Options tune a test relay.
type Options struct {
	Redis      *Redis                 // default NewRedis(tb)
	Mode       string                 // serve (default) or worker
	Config     func(c *config.Config) // adjust the config
	MaxWaitCap time.Duration          // default 20s (cards and waits give up sooner than in production)
	MCP        api.MCPOptions
	Logger     *slog.Logger
	// AgentSessions turns agent sessions on (default true: most tests need them).
	AgentSessionsOff bool
	Concurrency      int
	// Clock runs the domain on a faster clock (digests, quiet hours, wake limits in seconds).
	Clock *clock.Scaled
	// StallScanEvery is how often the stall scan runs (default 1 s in tests).
	StallScanEvery time.Duration
}

// Relay is a running test relay.
type Relay struct {
	tb     testing.TB
	App    *app.App
	URL    string
	Redis  *Redis
	Config config.Config
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// TestConfig is the config test relays start from: the scripted provider,
// the temp dir as folder, defaults elsewhere.
func TestConfig(tb testing.TB) config.Config {
	cfg := config.Default()
	cfg.Name = "desk"
	cfg.Addr = "127.0.0.1:0"
	dir := tb.TempDir()
	cfg.Folders = []string{dir}
	cfg.DefaultCwd = dir
	cfg.OwnerToken = OwnerToken
	cfg.Providers = []config.Provider{config.ScriptedProvider()}
	cfg.Settings.AgentSessions = true
	return cfg
}

// Start starts a relay and stops it when the test ends.
func Start(tb testing.TB, o Options) *Relay {
	tb.Helper()
	if o.Redis == nil {
		o.Redis = NewRedis(tb)
	}
	cfg := TestConfig(tb)
	if o.Redis.Dir != "" {
		cfg.Folders, cfg.DefaultCwd = []string{o.Redis.Dir}, o.Redis.Dir
	}
	cfg.RedisURL = o.Redis.URL
	if o.Redis.URL == "" {
		if o.Redis.DataDir == "" {
			tb.Fatalf("relaytest.Redis with neither a URL nor a data directory")
		}
		cfg.DataDir = o.Redis.DataDir // the embedded default
	}
	if o.AgentSessionsOff {
		cfg.Settings.AgentSessions = false
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	if o.MaxWaitCap == 0 {
		o.MaxWaitCap = 20 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if os.Getenv("RELAY_TEST_LOG") != "" {
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	if o.StallScanEvery == 0 {
		o.StallScanEvery = time.Second
	}
	a, err := app.New(cfg, app.Options{Mode: o.Mode, KeyPrefix: o.Redis.Prefix, Logger: o.Logger,
		MaxWaitCap: o.MaxWaitCap, MCP: o.MCP, Concurrency: o.Concurrency, SweepEvery: time.Second, ShutdownGrace: time.Second,
		Clock: o.Clock, StallScanEvery: o.StallScanEvery})
	if err != nil {
		var locked *embedded.LockedError
		if errors.As(err, &locked) {
			tb.Fatalf("new relay: %v (a test that starts a second live relay on one Redis calls NeedsSharedRedis)", err)
		}
		tb.Fatalf("new relay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{tb: tb, App: a, Redis: o.Redis, Config: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	select {
	case <-a.Started():
	case err := <-r.done:
		tb.Fatalf("relay did not start: %v", err)
	case <-time.After(15 * time.Second):
		tb.Fatalf("relay did not start within 15 s")
	}
	if a.Addr() != "" {
		r.URL = a.URL()
	}
	tb.Cleanup(r.Stop)
	return r
}

// Stop shuts the relay down gracefully and waits for it.
func (r *Relay) Stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				r.tb.Errorf("relay stopped with: %v", err)
			}
		case <-time.After(30 * time.Second):
			r.tb.Errorf("relay did not stop within 30 s")
		}
	})
}

// Owner sends an owner API request; body is JSON-encoded unless it is a string.
// It decodes the response into out (if non-nil) and returns the status.
func (r *Relay) Owner(method, path string, body, out any) int {
	r.tb.Helper()
	return r.do(method, path, OwnerToken, body, out)
}

func (r *Relay) do(method, path, token string, body, out any) int {
	r.tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			r.tb.Fatalf("encode body: %v", err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, r.URL+path, rd)
	if err != nil {
		r.tb.Fatalf("request: %v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			r.tb.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// Session is a session the owner created.
type Session struct {
	ID    string
	Token string
	Title string
}

// NewSession creates a session through the owner API (fields as POST /sessions takes).
func (r *Relay) NewSession(fields map[string]any) Session {
	r.tb.Helper()
	var out map[string]any
	if fields == nil {
		fields = map[string]any{}
	}
	if st := r.Owner("POST", "/api/v1/sessions", fields, &out); st != http.StatusCreated {
		r.tb.Fatalf("create session: status %d: %v", st, out)
	}
	return Session{ID: out["id"].(string), Token: out["token"].(string), Title: out["title"].(string)}
}

// Message writes as the owner in a session and returns the prompt's message id.
func (r *Relay) Message(sid, text string) string {
	r.tb.Helper()
	var out map[string]any
	if st := r.Owner("POST", "/api/v1/sessions/"+sid+"/messages", map[string]any{"text": text}, &out); st != http.StatusAccepted {
		r.tb.Fatalf("message: status %d: %v", st, out)
	}
	return out["message_id"].(string)
}

// Get reads a session through the owner API.
func (r *Relay) Get(sid string) map[string]any {
	r.tb.Helper()
	var out map[string]any
	if st := r.Owner("GET", "/api/v1/sessions/"+sid, nil, &out); st != http.StatusOK {
		r.tb.Fatalf("get session: status %d: %v", st, out)
	}
	return out
}

// Turn reads a turn's record straight from the store.
func (r *Relay) Turn(id string) *store.Turn {
	r.tb.Helper()
	t, err := r.App.Store().GetTurn(context.Background(), id)
	if err != nil {
		r.tb.Fatalf("turn %s: %v", id, err)
	}
	return t
}

// WaitTurn waits until a turn reaches one of the statuses.
func (r *Relay) WaitTurn(id string, d time.Duration, statuses ...store.TurnStatus) *store.Turn {
	r.tb.Helper()
	return waitTurnStatus(r.tb, d, r.Turn, "", id, statuses)
}

// waitTurnStatus waits until get(id) reaches one of the statuses (where
// names the relay in the failure, "" for the only one).
func waitTurnStatus(tb testing.TB, d time.Duration, get func(string) *store.Turn, where, id string, statuses []store.TurnStatus) *store.Turn {
	tb.Helper()
	var t *store.Turn
	Eventually(tb, d, func() bool {
		t = get(id)
		return slices.Contains(statuses, t.Status)
	}, "%sturn %s to reach %v", where, id, statuses)
	return t
}

// Eventually polls cond until it holds or d passes (for async work; no fixed sleeps).
func Eventually(tb testing.TB, d time.Duration, cond func() bool, format string, a ...any) {
	tb.Helper()
	testwait.Eventually(tb, d, testwait.Backoff, cond, "timed out after %s waiting for "+format, append([]any{d}, a...)...)
}

// Cards lists the pending cards.
func (r *Relay) Cards() []map[string]any {
	r.tb.Helper()
	var out struct {
		Cards []map[string]any `json:"cards"`
	}
	r.Owner("GET", "/api/v1/cards", nil, &out)
	return out.Cards
}

// WaitCard waits for a pending card of a session and returns it.
func (r *Relay) WaitCard(sid string) map[string]any {
	r.tb.Helper()
	var card map[string]any
	Eventually(r.tb, 15*time.Second, func() bool {
		for _, c := range r.Cards() {
			if c["session"] == sid {
				card = c
				return true
			}
		}
		return false
	}, "a card in session %s", sid)
	return card
}

// Decide answers a card.
func (r *Relay) Decide(cardID, decision string) {
	r.tb.Helper()
	var out map[string]any
	if st := r.Owner("POST", "/api/v1/cards/"+cardID, map[string]any{"decision": decision}, &out); st != http.StatusOK {
		r.tb.Fatalf("decide %s: status %d: %v", cardID, st, out)
	}
}

// MCP is an MCP client session of one relay session (the go-sdk client over Streamable HTTP).
type MCP struct {
	tb      testing.TB
	Session *mcp.ClientSession
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(req)
}

// Connect opens an MCP client session as the relay session with token.
func (r *Relay) Connect(token string, opts *mcp.ClientOptions) *MCP {
	r.tb.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "relaytest", Version: "1"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: r.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: http.DefaultTransport}}, DisableStandaloneSSE: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, tr, nil)
	if err != nil {
		r.tb.Fatalf("mcp connect: %v", err)
	}
	r.tb.Cleanup(func() { _ = s.Close() })
	return &MCP{tb: r.tb, Session: s}
}

// MCPStatus is the HTTP status of one raw relay_tool call (list_relays) on
// /mcp with token: 200 for a token the relay takes, 401 for one it refuses.
func (r *Relay) MCPStatus(token string) int {
	r.tb.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_tool","arguments":{"action":"list_relays"}}}`
	req, err := http.NewRequest(http.MethodPost, r.URL+"/mcp", strings.NewReader(body))
	if err != nil {
		r.tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.tb.Fatalf("POST /mcp: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Call calls relay_tool and returns the envelope and isError.
func (m *MCP) Call(args map[string]any) (map[string]any, bool) {
	m.tb.Helper()
	return m.CallTool("relay_tool", args, nil)
}

// CallTool calls a tool by name, with an optional progress token.
func (m *MCP) CallTool(name string, args map[string]any, progressToken any) (map[string]any, bool) {
	m.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if progressToken != nil {
		p.SetProgressToken(progressToken)
	}
	res, err := m.Session.CallTool(ctx, p)
	if err != nil {
		m.tb.Fatalf("call %s %v: %v", name, args, err)
	}
	if len(res.Content) != 1 {
		m.tb.Fatalf("call %v: want one content item, got %d", args, len(res.Content))
	}
	txt, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		m.tb.Fatalf("call %v: content is %T, not text", args, res.Content[0])
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(txt.Text), &env); err != nil {
		m.tb.Fatalf("call %v: text is not JSON: %v", args, err)
	}
	return env, res.IsError
}

// MustOK calls relay_tool and fails the test unless the result is ok.
func (m *MCP) MustOK(args map[string]any) map[string]any {
	m.tb.Helper()
	env, isErr := m.Call(args)
	if isErr || env["ok"] != true {
		m.tb.Fatalf("call %v: want ok, got %v", args, env)
	}
	return env
}

// MustFail calls relay_tool and fails the test unless it fails with code.
func (m *MCP) MustFail(args map[string]any, code string) map[string]any {
	m.tb.Helper()
	env, isErr := m.Call(args)
	if !isErr || env["ok"] != false || env["code"] != code {
		m.tb.Fatalf("call %v: want %s, got isError=%v %v", args, code, isErr, env)
	}
	return env
}

// Script builds a scripted-provider prompt from steps.
func Script(steps ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"script": steps})
	if err != nil {
		panic(fmt.Sprintf("script: %v", err))
	}
	return string(b)
}

// Messages returns a session's messages as the owner API shows them (up to
// the last 1,000), oldest first; a role ("event", "schedule", …) filters them.
func (r *Relay) Messages(sid, role string) []map[string]any {
	r.tb.Helper()
	var out struct {
		Messages []map[string]any `json:"messages"`
	}
	if st := r.Owner("GET", "/api/v1/sessions/"+sid+"?last=1000", nil, &out); st != http.StatusOK {
		r.tb.Fatalf("get session %s: status %d", sid, st)
	}
	if role == "" {
		return out.Messages
	}
	var kept []map[string]any
	for _, m := range out.Messages {
		if m["role"] == role {
			kept = append(kept, m)
		}
	}
	return kept
}

// EventTexts returns the texts of the event messages delivered into a session.
func (r *Relay) EventTexts(sid string) []string {
	r.tb.Helper()
	var out []string
	for _, m := range r.Messages(sid, "event") {
		out = append(out, m["text"].(string))
	}
	return out
}

// ToolResults returns the relay_tool results a scripted turn's reply holds
// (each on its own line, R11.1), in order.
func ToolResults(reply string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(reply, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			if _, ok := m["ok"]; ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// InTurn runs one relay_tool call as session s inside a turn of s (the owner
// writes a script with a tool step; relay defaults to "this"). With a
// decision the call's card is awaited and answered. It returns the tool's
// result and the card (nil without a decision).
func (r *Relay) InTurn(s Session, tool map[string]any, decision string) (map[string]any, map[string]any) {
	r.tb.Helper()
	if _, ok := tool["relay"]; !ok {
		tool["relay"] = "this"
	}
	mid := r.Message(s.ID, Script(map[string]any{"tool": tool}))
	var card map[string]any
	if decision != "" {
		card = r.WaitCard(s.ID)
		r.Decide(card["id"].(string), decision)
	}
	turn := r.WaitTurn(mid, 30*time.Second, "done", "error", "stopped")
	if turn.Status != "done" {
		r.tb.Fatalf("turn of %s ended %s: %s", s.ID, turn.Status, turn.Error)
	}
	res := ToolResults(turn.Reply)
	if len(res) != 1 {
		r.tb.Fatalf("reply of the turn holds %d tool results, want 1: %q", len(res), turn.Reply)
	}
	return res[0], card
}
