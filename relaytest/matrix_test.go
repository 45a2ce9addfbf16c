package relaytest

// The permission matrix (SPEC §2, §4.2, §10.4, §12, R18.2): every relay_tool
// action × every kind of caller × agent sessions off and on, and every owner
// API route × every kind of token. A refused call — a 401 before the MCP layer
// or the owner API, or REMOTE_RELAY_DISABLED — must change nothing in Redis:
// each one is bracketed by a dump of the relay's keys (type, content, TTL).
//
// The action list is read from relay_tool's input schema (tools/list) and the
// route list from the router itself, so an action or route added later without
// a row here fails the test.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/api"
	"github.com/oar/relay/domain"
	"github.com/oar/relay/store"
)

// ---- Redis dumps -------------------------------------------------------------

// mxKey is one key of a dump: its type, its content rendered as text, and its
// remaining time to live (-1 without one).
type mxKey struct {
	Type string
	Val  string
	PTTL time.Duration
}

type mxDump map[string]mxKey

// mxSnapshot reads every key of the relay's prefix (PREFIX:*; asynq's own keys
// are asynq:{PREFIX:…} and not part of it) with type-specific reads, which
// work the same on Redis and on the embedded server.
func mxSnapshot(t testing.TB, rdb redis.UniversalClient, prefix string) mxDump {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, store.KeyBase(prefix)+"*", 1000).Result()
		if err != nil {
			t.Fatalf("scan %s:*: %v", prefix, err)
		}
		keys = append(keys, ks...)
		cursor = next
		if cursor == 0 {
			break
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	// Written on their own clock, not by any call: each process's heartbeat
	// (procs) and the short poll locks of paired relays (lock:…).
	keys = slices.DeleteFunc(keys, func(k string) bool {
		return k == store.KeyBase(prefix)+"procs" || strings.HasPrefix(k, store.KeyBase(prefix)+"lock:")
	})
	types := make([]*redis.StatusCmd, len(keys))
	p := rdb.Pipeline()
	for i, k := range keys {
		types[i] = p.Type(ctx, k)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatalf("dump types: %v", err)
	}
	vals := make([]redis.Cmder, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	p = rdb.Pipeline()
	for i, k := range keys {
		switch types[i].Val() {
		case "string":
			vals[i] = p.Get(ctx, k)
		case "hash":
			vals[i] = p.HGetAll(ctx, k)
		case "list":
			vals[i] = p.LRange(ctx, k, 0, -1)
		case "set":
			vals[i] = p.SMembers(ctx, k)
		case "zset":
			vals[i] = p.ZRangeWithScores(ctx, k, 0, -1)
		case "stream":
			vals[i] = p.XRange(ctx, k, "-", "+")
		}
		ttls[i] = p.PTTL(ctx, k)
	}
	_, _ = p.Exec(ctx) // a key that vanished in between answers redis.Nil; judged per key below
	d := mxDump{}
	for i, k := range keys {
		typ := types[i].Val()
		if typ == "none" {
			continue
		}
		var val string
		switch c := vals[i].(type) {
		case *redis.StringCmd:
			val = c.Val()
		case *redis.MapStringStringCmd:
			var kv []string
			for f, v := range c.Val() {
				kv = append(kv, f+"="+v)
			}
			sort.Strings(kv)
			val = strings.Join(kv, "\n")
		case *redis.StringSliceCmd:
			l := c.Val()
			if typ == "set" {
				l = slices.Clone(l)
				sort.Strings(l)
			}
			val = strings.Join(l, "\n")
		case *redis.ZSliceCmd:
			var zs []string
			for _, z := range c.Val() {
				zs = append(zs, fmt.Sprintf("%v %v", z.Member, z.Score))
			}
			val = strings.Join(zs, "\n")
		case *redis.XMessageSliceCmd:
			var xs []string
			for _, x := range c.Val() {
				b, _ := json.Marshal(x.Values)
				xs = append(xs, x.ID+" "+string(b))
			}
			val = strings.Join(xs, "\n")
		default:
			val = "(unread type " + typ + ")"
		}
		if vals[i] != nil {
			if err := vals[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("dump %s (%s): %v", k, typ, err)
			}
		}
		d[k] = mxKey{Type: typ, Val: val, PTTL: ttls[i].Val()}
	}
	return d
}

// mxTTLRenewed are keys whose TTL a background loop renews while nothing is
// called: the lease of a session whose turn runs (renewed every 10 s by its
// worker, ARCHITECTURE "A drain"). Their content is still compared.
var mxTTLRenewed = regexp.MustCompile(`:lease:[^:]+$`)

// mxDiff lists what differs between two dumps: keys added, removed, changed,
// and TTLs that were set, removed or renewed (a TTL only counts down by itself).
func mxDiff(before, after mxDump) []string {
	var out []string
	short := func(s string) string {
		s = strings.ReplaceAll(s, "\n", " | ")
		if len(s) > 300 {
			s = s[:300] + "…"
		}
		return s
	}
	for k, b := range before {
		a, ok := after[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("- %s (%s) removed: was %s", k, b.Type, short(b.Val)))
		case a.Type != b.Type || a.Val != b.Val:
			out = append(out, fmt.Sprintf("~ %s (%s→%s): %s  →  %s", k, b.Type, a.Type, short(b.Val), short(a.Val)))
		case (a.PTTL < 0) != (b.PTTL < 0):
			out = append(out, fmt.Sprintf("~ %s TTL %v → %v", k, b.PTTL, a.PTTL))
		case a.PTTL > b.PTTL && !mxTTLRenewed.MatchString(k):
			out = append(out, fmt.Sprintf("~ %s TTL renewed %v → %v", k, b.PTTL, a.PTTL))
		}
	}
	for k, a := range after {
		if _, ok := before[k]; !ok {
			out = append(out, fmt.Sprintf("+ %s (%s) added: %s", k, a.Type, short(a.Val)))
		}
	}
	sort.Strings(out)
	return out
}

// ---- HTTP helpers ----------------------------------------------------------

// mxHTTP sends each request from a loopback address of its own turn
// (127.0.0.2 … 127.0.0.251): the matrix sends thousands of wrong tokens on
// purpose, and more than 20 from one address within a minute are answered
// 429 (R18.23), which would hide the answer each row checks.
var mxHTTP = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
	DisableKeepAlives: true,
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		n := mxSource.Add(1)%250 + 2
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(n))}}
		return d.DialContext(ctx, network, addr)
	},
}}

var mxSource atomic.Uint32

// mxUnknownToken stands for a token the relay never made: mxRequest sends a
// new random one in its place each time.
const mxUnknownToken = "0123456789abcdef0123456789abcdef0123456789abcdef"

// mxTokenRefused: the answer refuses the request's token. A token sent
// wrong more than 20 times a minute (the archived session's, a session's on
// the owner API) is refused 429 REMOTE_RELAY_AUTH by its prefix from every
// address (R18.23, R18.30) instead of 401: a refusal of the token all the
// same, and never a leak.
func mxTokenRefused(st int, body string) bool {
	return st == http.StatusUnauthorized ||
		st == http.StatusTooManyRequests && strings.Contains(body, `"code":"`+domain.CodeAuth+`"`)
}

// mxRequest sends one request with an optional bearer token (token "" = no
// Authorization header) and returns the status and the start of the body.
func mxRequest(t testing.TB, method, url, token string, header map[string]string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode body: %v", err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("request %s %s: %v", method, url, err)
	}
	if token == mxUnknownToken { // a token of its own each time (R18.30 counts a wrong token's prefix too)
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		token = hex.EncodeToString(b)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := mxHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(data)
}

// mxResultText returns the tool result's text from a /mcp response body
// (plain JSON or SSE "data:" lines), or the body itself.
func mxResultText(body string) string {
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "data:"))
		var msg struct {
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(l), &msg) == nil && len(msg.Result.Content) > 0 {
			return msg.Result.Content[0].Text
		}
	}
	return body
}

// mxMCPHeaders are what a Streamable HTTP client sends with a POST.
var mxMCPHeaders = map[string]string{"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18"}

func mxInitialize() map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "matrix", "version": "1"}}}
}

func mxToolsCall(args map[string]any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
		"params": map[string]any{"name": "relay_tool", "arguments": args}}
}

// mxConnectErr connects the go-sdk client with token and returns the error
// (nil when it connected; the session is then closed).
func mxConnectErr(r *Relay, token string) error {
	c := mcp.NewClient(&mcp.Implementation{Name: "relaytest-matrix", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: r.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: mxHTTP.Transport}}, DisableStandaloneSSE: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, tr, nil)
	if err == nil {
		_ = s.Close()
	}
	return err
}

// mxSchemaActions reads the enum of relay_tool's "action" argument from tools/list.
func mxSchemaActions(t *testing.T, m *MCP) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := m.Session.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	for _, tool := range res.Tools {
		if tool.Name != "relay_tool" {
			continue
		}
		b, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatalf("encode relay_tool schema: %v", err)
		}
		var s struct {
			Properties struct {
				Action struct {
					Enum []string `json:"enum"`
				} `json:"action"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil || len(s.Properties.Action.Enum) == 0 {
			t.Fatalf("relay_tool schema has no action enum (%v): %s", err, b)
		}
		return s.Properties.Action.Enum
	}
	t.Fatalf("tools/list does not list relay_tool")
	return nil
}

// mxOwnerRoutes lists every owner API route as "METHOD /api/v1/pattern": from
// the router itself (gin's route table); if the router is ever wrapped so that
// its table cannot be read, from the registrations in api/owner.go.
func mxOwnerRoutes(t *testing.T, rel *domain.Relay, st api.EdgeStore) []string {
	t.Helper()
	var out []string
	h := api.NewRouter(api.Options{Relay: rel, Store: st, OwnerToken: "matrix-route-listing"})
	if g, ok := h.(*gin.Engine); ok {
		for _, ri := range g.Routes() {
			if strings.HasPrefix(ri.Path, "/api/v1/") || ri.Path == "/api/v1" {
				out = append(out, ri.Method+" "+ri.Path)
			}
		}
	} else {
		src, err := os.ReadFile("../api/owner.go")
		if err != nil {
			t.Fatalf("router is %T (not *gin.Engine) and api/owner.go cannot be read: %v", h, err)
		}
		re := regexp.MustCompile(`\bg\.(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS|Any)\("([^"]+)"`)
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			methods := []string{m[1]}
			if m[1] == "Any" {
				methods = []string{"GET", "POST", "PUT", "PATCH", "HEAD", "OPTIONS", "DELETE", "CONNECT", "TRACE"}
			}
			for _, me := range methods {
				out = append(out, me+" /api/v1"+m[2])
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no owner API routes found")
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// ---- the matrix ----------------------------------------------------------------

// mxAction is one relay_tool call of the matrix.
type mxAction struct {
	name string
	note string // variant, e.g. "with session"
	args map[string]any
	// exempt: works with agent sessions off (R4.2, R10.4).
	exempt bool
}

func (a mxAction) String() string {
	if a.note != "" {
		return a.name + " (" + a.note + ")"
	}
	return a.name
}

// mxRoute is one owner API route with the request each kind of token sends:
// refused (a real target and a real body, so that "nothing changed" means
// something) and owner (ids that do not exist, so the owner's rows change nothing).
type mxRoute struct {
	refusedPath string
	refusedBody any
	ownerPath   string
	ownerBody   any
}

// mxCaller is a token that /mcp and the owner API answer with 401 (except the
// owner token on the owner API).
type mxCaller struct {
	name  string
	token string
}

// TestPermissionMatrix: every relay_tool action × {owner token, live session
// token, archived session token, unknown token, no token} × agent sessions
// {off, on}; every owner API route × the same tokens. Refused calls change
// nothing in Redis.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := Start(t, Options{}) // agent sessions on for the setup
	rdb := r.App.Redis()     // the relay's own client: a real Redis or the embedded store
	prefix := r.Redis.Prefix
	snap := func() mxDump { return mxSnapshot(t, rdb, prefix) }

	// ---- setup: real targets for every argument -------------------------------
	caller := r.NewSession(map[string]any{"title": "matrix caller"})
	target := r.NewSession(map[string]any{"title": "matrix target"})
	watched := r.NewSession(map[string]any{"title": "matrix watched"})
	archived := r.NewSession(map[string]any{"title": "matrix archived"})
	m := r.Connect(caller.Token, nil)

	// The archived session's token is used (and so known to the process) before
	// it is archived: R18.2 revokes it at once, also where it was seen before.
	mArch := r.Connect(archived.Token, nil)
	mArch.MustOK(map[string]any{"action": "list_relays"})
	if st, body := mxRequest(t, "POST", r.URL+"/mcp", archived.Token, mxMCPHeaders, mxInitialize()); st != http.StatusOK {
		t.Fatalf("initialize as the session to archive: %d %s", st, body)
	}
	if st := r.Owner("POST", "/api/v1/sessions/"+archived.ID+"/archive", nil, nil); st != http.StatusOK {
		t.Fatalf("archive: status %d", st)
	}

	// A finished turn in the target (wait's message_id).
	doneMsg := r.Message(target.ID, "hello from the matrix")
	r.WaitTurn(doneMsg, turnWait, "done")

	// The caller watches a quiet session (a real subscription; the first
	// subscribe of a conversation asks a card).
	res, _ := r.InTurn(caller, map[string]any{"action": "subscribe", "sessions": []string{watched.ID}}, "allow")
	mustEnvOK(t, res)
	subID := str(obj(t, res["subscription"], "subscription")["id"])
	// A schedule into the caller's own conversation, firing in an hour.
	env := m.MustOK(map[string]any{"action": "schedule", "relay": "this", "text": "matrix: later", "every_minutes": 60})
	schID := str(env["schedule_id"])
	// Two asks: one stays open (the inbox route), one is withdrawn by the matrix.
	askOpen := str(m.MustOK(map[string]any{"action": "ask", "question": "matrix: keep me open?"})["question_id"])
	askWithdraw := str(m.MustOK(map[string]any{"action": "ask", "question": "matrix: withdraw me?"})["question_id"])

	// The target: a finished background task, a subscription of its own (to
	// transfer), and a running turn waiting on a question card (to stop, to answer).
	qMsg := r.Message(target.ID, Script(
		map[string]any{"task": map[string]any{"description": "go test ./...", "lines": []string{"ok  example.com/pkg 0.01s"}, "line_ms": 1, "exit": 0, "background": true}},
		map[string]any{"tool": map[string]any{"action": "subscribe", "relay": "this", "sessions": []string{watched.ID}}},
		map[string]any{"question": map[string]any{"text": "matrix: pick one", "options": []string{"A", "B"}}}))
	card := r.WaitCard(target.ID)
	r.Decide(str(card["id"]), "allow")
	var taskID, qID string
	Eventually(t, turnWait, func() bool {
		s := r.Get(target.ID)
		qs, _ := s["pendingQuestions"].([]any)
		tasks, _ := s["tasks"].([]any)
		if len(qs) != 1 || len(tasks) != 1 {
			return false
		}
		tk := obj(t, tasks[0], "task")
		if tk["status"] != "done" {
			return false
		}
		taskID, qID = str(tk["taskId"]), str(obj(t, qs[0], "question")["id"])
		return true
	}, "the target's task to end and its question to wait")
	if tr := r.Turn(qMsg); tr.Status != "running" {
		t.Fatalf("target turn %s, want running (waiting on its question)", tr.Status)
	}
	for name, id := range map[string]string{"subscription": subID, "schedule": schID, "ask": askOpen, "ask to withdraw": askWithdraw, "task": taskID, "question": qID} {
		if id == "" {
			t.Fatalf("setup: no %s id", name)
		}
	}

	// Let background work of the setup (event fan-out, deliveries) finish:
	// three dumps in a row, 100 ms apart, the same.
	settle := func(what string) {
		t.Helper()
		prev := snap()
		same := 0
		deadline := time.Now().Add(10 * time.Second)
		for same < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Redis keeps changing without any call: %s", what, strings.Join(mxDiff(prev, snap()), "\n"))
			}
			time.Sleep(100 * time.Millisecond)
			cur := snap()
			if len(mxDiff(prev, cur)) == 0 {
				same++
			} else {
				same = 0
			}
			prev = cur
		}
	}

	// refused runs one call that must be refused (call reports whether it was)
	// and checks that Redis did not change. A call that was not refused (a
	// token that leaked through) is reported by call itself; what it changed
	// is shown with it, and Redis is let settle before the next check so its
	// after-effects are not blamed on a later call.
	refusedCalls, dirty := 0, false
	refused := func(what string, call func() bool) {
		t.Helper()
		if dirty {
			settle("after " + what)
			dirty = false
		}
		refusedCalls++
		before := snap()
		wasRefused := call()
		d := mxDiff(before, snap())
		if len(d) > 12 {
			d = append(d[:12], fmt.Sprintf("… and %d more", len(d)-12))
		}
		switch {
		case !wasRefused:
			dirty = true
			if len(d) > 0 {
				t.Errorf("  … and %s changed Redis:\n  %s", what, strings.Join(d, "\n  "))
			}
		case len(d) > 0:
			t.Errorf("FINDING: %s was refused but changed Redis:\n  %s", what, strings.Join(d, "\n  "))
		}
	}

	// ---- the tables ---------------------------------------------------------------
	const unknownToken = mxUnknownToken
	this := func(kv ...any) map[string]any {
		a := map[string]any{"relay": "this"}
		for i := 0; i+1 < len(kv); i += 2 {
			a[kv[i].(string)] = kv[i+1]
		}
		return a
	}
	// In the order the "on" phase runs them: reads first, then what changes
	// state, what ends the target's turn and the target itself last.
	actions := []mxAction{
		{name: "list_relays", args: map[string]any{}, exempt: true},
		{name: "relay_info", args: this()},
		{name: "usage", args: this()},
		{name: "list_sessions", args: this("scope", "all")},
		{name: "read_session", args: this("session", target.ID, "last", 5)},
		{name: "read_task_output", args: this("session", target.ID, "task_id", taskID, "lines", 10)},
		{name: "wait", args: this("session", target.ID, "message_id", doneMsg, "wait_seconds", 0)},
		{name: "list_subscriptions", args: this()},
		{name: "list_schedules", args: this()},
		{name: "list_questions", args: this(), exempt: true},
		{name: "ask", note: "own conversation", args: this("question", "matrix: may I?"), exempt: true},
		{name: "withdraw", args: this("question_id", askWithdraw), exempt: true},
		{name: "schedule", args: this("text", "matrix: must not be scheduled", "every_minutes", 30)},
		{name: "unschedule", args: this("schedule_id", schID)},
		{name: "unsubscribe", args: this("subscription_id", subID)},
		{name: "transfer_subscriptions", args: this("from", target.ID)},
		{name: "subscribe", args: this("sessions", []string{target.ID})},
		{name: "update_session", args: this("session", target.ID, "title", "matrix: must not be renamed")},
		{name: "create_session", args: this("text", "matrix: must not start", "title", "matrix: must not exist", "wait_seconds", 0)},
		{name: "send", args: this("session", target.ID, "text", "matrix: this prompt must not arrive", "wait_seconds", 0)},
		{name: "ask", note: "with session", args: this("question", "matrix: on behalf?", "session", target.ID)},
		{name: "answer_question", args: this("session", target.ID, "question_id", qID, "answer", "A")},
		{name: "stop", args: this("session", target.ID)},
		{name: "archive", args: this("session", target.ID)},
	}

	// Every action of the schema (and of the domain) has a row, and no row names
	// an action the schema does not list.
	enum := mxSchemaActions(t, m)
	inTable := map[string]bool{}
	for _, a := range actions {
		inTable[a.name] = true
	}
	for _, name := range enum {
		if !inTable[name] {
			t.Errorf("relay_tool action %q (schema enum) has no row in the permission matrix: add one", name)
		}
	}
	for name := range inTable {
		if !slices.Contains(enum, name) {
			t.Errorf("the matrix has a row for %q, which relay_tool's schema does not list", name)
		}
	}
	if got, want := domain.Actions(), slices.Sorted(slices.Values(enum)); !slices.Equal(got, want) {
		t.Errorf("the domain's actions %v differ from the schema enum %v", got, want)
	}

	// Owner API routes, refused request (real ids, real bodies) and owner request.
	const (
		fakeCard  = "card_00000000000000000000"
		fakeSch   = "sch_0000000000000000"
		fakeSub   = "sub_0000000000000000"
		fakeAsk   = "ask_0000000000000000"
		fakeQ     = "q_0000000000000000"
		fakeGroup = "grp_0000000000000000"
		fakeRelay = "no-such-relay"
	)
	sess, noSess := "/api/v1/sessions/"+target.ID, "/api/v1/sessions/"+noSuchSession
	routes := map[string]mxRoute{
		"POST /api/v1/sessions": {"/api/v1/sessions", map[string]any{"title": "matrix: must not exist", "text": "hi"},
			"/api/v1/sessions", map[string]any{"provider": "no-such-provider"}},
		"GET /api/v1/sessions":                     {"/api/v1/sessions", nil, "/api/v1/sessions", nil},
		"GET /api/v1/sessions/:id":                 {sess, nil, sess, nil},
		"PATCH /api/v1/sessions/:id":               {sess, map[string]any{"title": "matrix: renamed", "may_create_sessions": true}, noSess, map[string]any{"title": "x"}},
		"DELETE /api/v1/sessions/:id":              {sess, nil, noSess, nil},
		"POST /api/v1/sessions/:id/messages":       {sess + "/messages", map[string]any{"text": "matrix: must not arrive"}, noSess + "/messages", map[string]any{"text": "x"}},
		"POST /api/v1/sessions/:id/stop":           {sess + "/stop", nil, noSess + "/stop", nil},
		"POST /api/v1/sessions/:id/archive":        {sess + "/archive", nil, noSess + "/archive", nil},
		"POST /api/v1/sessions/:id/kill":           {sess + "/kill", nil, noSess + "/kill", nil},                                                                                    // R23.6
		"POST /api/v1/sessions/:id/token":          {sess + "/token", nil, noSess + "/token", nil},                                                                                  // R23.5
		"PUT /api/v1/groups/order":                 {"/api/v1/groups/order", map[string]any{"ids": []string{}}, "/api/v1/groups/order", map[string]any{"ids": []string{fakeGroup}}}, // R23.7
		"POST /api/v1/sessions/:id/questions/:qid": {sess + "/questions/" + qID, map[string]any{"answer": "A"}, noSess + "/questions/" + fakeQ, map[string]any{"answer": "A"}},
		"GET /api/v1/cards":                        {"/api/v1/cards", nil, "/api/v1/cards", nil},
		"POST /api/v1/cards/:id":                   {"/api/v1/cards/" + fakeCard, map[string]any{"decision": "allow"}, "/api/v1/cards/" + fakeCard, map[string]any{"decision": "allow"}},
		"GET /api/v1/settings":                     {"/api/v1/settings", nil, "/api/v1/settings", nil},
		"PATCH /api/v1/settings":                   {"/api/v1/settings", nil, "/api/v1/settings", nil}, // bodies per phase, below
		"GET /api/v1/groups":                       {"/api/v1/groups", nil, "/api/v1/groups", nil},
		"POST /api/v1/groups":                      {"/api/v1/groups", map[string]any{"name": "matrix: must not exist"}, "/api/v1/groups", map[string]any{}},
		"PATCH /api/v1/groups/:id":                 {"/api/v1/groups/" + fakeGroup, map[string]any{"name": "x"}, "/api/v1/groups/" + fakeGroup, map[string]any{"name": "x"}},
		"DELETE /api/v1/groups/:id":                {"/api/v1/groups/" + fakeGroup, nil, "/api/v1/groups/" + fakeGroup, nil},
		"GET /api/v1/schedules":                    {"/api/v1/schedules", nil, "/api/v1/schedules", nil},
		"DELETE /api/v1/schedules/:id":             {"/api/v1/schedules/" + schID, nil, "/api/v1/schedules/" + fakeSch, nil},
		"GET /api/v1/inbox":                        {"/api/v1/inbox", nil, "/api/v1/inbox", nil},
		"POST /api/v1/inbox/:id":                   {"/api/v1/inbox/" + askOpen, map[string]any{"answer": "yes"}, "/api/v1/inbox/" + fakeAsk, map[string]any{"answer": "yes"}},
		"GET /api/v1/relays":                       {"/api/v1/relays", nil, "/api/v1/relays", nil},
		"GET /api/v1/stream":                       {"/api/v1/stream", nil, "/api/v1/stream?once=1", nil}, // the console's SSE; once=1 ends after hello
		"POST /api/v1/relays":                      {"/api/v1/relays", map[string]any{"name": "matrix", "url": "http://127.0.0.1:1", "token": "x", "permission": "full"}, "/api/v1/relays", map[string]any{}},
		"PATCH /api/v1/relays/:id":                 {"/api/v1/relays/" + fakeRelay, map[string]any{"permission": "none"}, "/api/v1/relays/" + fakeRelay, map[string]any{"permission": "none"}},
		"PATCH /api/v1/relays/:name":               {"/api/v1/relays/" + fakeRelay, map[string]any{"permission": "none"}, "/api/v1/relays/" + fakeRelay, map[string]any{"permission": "none"}},
		"DELETE /api/v1/relays/:id":                {"/api/v1/relays/" + fakeRelay, nil, "/api/v1/relays/" + fakeRelay, nil},
		"DELETE /api/v1/relays/:name":              {"/api/v1/relays/" + fakeRelay, nil, "/api/v1/relays/" + fakeRelay, nil},
		"DELETE /api/v1/subscriptions/:id":         {"/api/v1/subscriptions/" + subID, nil, "/api/v1/subscriptions/" + fakeSub, nil},
		"DELETE /api/v1/peer-tokens/:id":           {"/api/v1/peer-tokens/0000000000000000", nil, "/api/v1/peer-tokens/0000000000000000", nil},
	}
	for _, me := range []string{"GET", "POST", "PUT", "PATCH", "HEAD", "OPTIONS", "DELETE", "CONNECT", "TRACE"} {
		routes[me+" /api/v1/peer-tokens"] = mxRoute{"/api/v1/peer-tokens", nil, "/api/v1/peer-tokens", nil}
	}
	ownerRoutes := mxOwnerRoutes(t, r.App.Relay(), r.App.Store())
	for _, rt := range ownerRoutes {
		if _, ok := routes[rt]; !ok {
			t.Errorf("owner API route %q has no row in the permission matrix: add one", rt)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	badCallers := []mxCaller{
		{"owner token", OwnerToken},
		{"archived session's token", archived.Token},
		{"unknown token", unknownToken},
		{"no token", ""},
	}
	sessionCallers := []mxCaller{
		{"live session's token", caller.Token},
		{"archived session's token", archived.Token},
		{"unknown token", unknownToken},
		{"no token", ""},
	}

	setAgentSessions := func(on bool) {
		t.Helper()
		var st map[string]any
		if code := r.Owner("PATCH", "/api/v1/settings", map[string]any{"agent_sessions": on}, &st); code != http.StatusOK {
			t.Fatalf("PATCH /settings agent_sessions=%v: %d %v", on, code, st)
		}
		if st["agent_sessions"] != nil && st["agent_sessions"] != on {
			t.Fatalf("PATCH /settings agent_sessions=%v answered %v", on, st)
		}
	}

	envelopeOK := func(what string, a mxAction, env map[string]any, isErr bool) {
		t.Helper()
		ok, isBool := env["ok"].(bool)
		if !isBool {
			t.Errorf("%s: envelope has no boolean ok: %v", what, env)
			return
		}
		if ok == isErr {
			t.Errorf("%s: ok=%v but isError=%v: %v", what, ok, isErr, env)
		}
		summary, _ := env["summary"].(string)
		if ok {
			switch {
			case a.name == "list_relays":
				if _, has := env["relay"]; has || !strings.HasPrefix(summary, "list_relays: ") {
					t.Errorf("%s: list_relays envelope: relay %v, summary %q", what, env["relay"], summary)
				}
			case env["relay"] != r.Config.Name || !strings.HasPrefix(summary, a.name+" → "+r.Config.Name):
				t.Errorf("%s: envelope relay %v, summary %q", what, env["relay"], summary)
			}
			return
		}
		code, _ := env["code"].(string)
		msg, _ := env["error"].(string)
		if !strings.HasPrefix(code, "REMOTE_RELAY_") || msg == "" {
			t.Errorf("%s: failure envelope without code or error: %v", what, env)
		}
	}

	// ---- one phase per setting ----------------------------------------------
	onCodes := map[string]string{}
	for _, on := range []bool{false, true} {
		phase := "agent sessions off"
		if on {
			phase = "agent sessions on"
		}
		setAgentSessions(on)
		settle(phase)

		// /mcp: every token but a live session's is refused with 401 before the
		// MCP layer — initialize and a tools/call of every action, raw.
		for _, c := range badCallers {
			refused(fmt.Sprintf("%s: POST /mcp initialize with the %s", phase, c.name), func() bool {
				st, body := mxRequest(t, "POST", r.URL+"/mcp", c.token, mxMCPHeaders, mxInitialize())
				if !mxTokenRefused(st, body) {
					t.Errorf("%s: POST /mcp initialize with the %s: status %d, want 401: %.200s", phase, c.name, st, body)
				}
				return mxTokenRefused(st, body)
			})
			for _, a := range actions {
				args := map[string]any{"action": a.name}
				for k, v := range a.args {
					args[k] = v
				}
				refused(fmt.Sprintf("%s: POST /mcp tools/call %s with the %s", phase, a, c.name), func() bool {
					st, body := mxRequest(t, "POST", r.URL+"/mcp", c.token, mxMCPHeaders, mxToolsCall(args))
					if !mxTokenRefused(st, body) {
						t.Errorf("LEAK: %s: POST /mcp tools/call %s with the %s: status %d, want 401: %.300s", phase, a, c.name, st, mxResultText(body))
					}
					return mxTokenRefused(st, body)
				})
			}
			refused(fmt.Sprintf("%s: go-sdk client connecting with the %s", phase, c.name), func() bool {
				err := mxConnectErr(r, c.token)
				if err == nil {
					t.Errorf("%s: the go-sdk client connected to /mcp with the %s", phase, c.name)
				}
				return err != nil
			})
		}
		// A client of the archived session that connected before the archive.
		refused(phase+": tools/call by a client of the archived session connected before", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := mArch.Session.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: map[string]any{"action": "list_relays"}})
			if err == nil {
				t.Errorf("%s: the archived session's open client still calls relay_tool (R18.2): isError=%v %v", phase, res.IsError, res.StructuredContent)
			}
			return err != nil
		})
		// Control: the same raw requests with a live session's token pass.
		if st, body := mxRequest(t, "POST", r.URL+"/mcp", caller.Token, mxMCPHeaders, mxInitialize()); st != http.StatusOK {
			t.Errorf("%s: control: POST /mcp initialize with a live token: %d %.200s", phase, st, body)
		}

		// The owner API: every route refuses every token but the owner's.
		settingsBody := map[string]any{"agent_sessions": !on, "max_wait_seconds": 3600}
		for _, c := range sessionCallers {
			for _, rt := range ownerRoutes {
				row := routes[rt]
				method := strings.SplitN(rt, " ", 2)[0]
				body := row.refusedBody
				if rt == "PATCH /api/v1/settings" {
					body = settingsBody
				}
				refused(fmt.Sprintf("%s: %s %s with the %s", phase, method, row.refusedPath, c.name), func() bool {
					st, resp := mxRequest(t, method, r.URL+row.refusedPath, c.token, nil, body)
					if !mxTokenRefused(st, resp) {
						t.Errorf("LEAK: %s: %s %s with the %s: status %d, want 401: %.200s", phase, method, row.refusedPath, c.name, st, resp)
					}
					return mxTokenRefused(st, resp)
				})
			}
		}

		// relay_tool as a live session.
		for _, a := range actions {
			args := map[string]any{"action": a.name}
			for k, v := range a.args {
				args[k] = v
			}
			what := fmt.Sprintf("%s: %s as a live session", phase, a)
			if !on && !a.exempt {
				refused(what, func() bool {
					env, isErr := m.Call(args)
					if !isErr || env["ok"] != false || env["code"] != domain.CodeDisabled {
						t.Errorf("LEAK: %s: want %s, got isError=%v %v", what, domain.CodeDisabled, isErr, env)
						return false
					}
					nothing := "Nothing was done."
					if a.name == "update_session" { // its refusals all say so (issue 21 item 10)
						nothing = "Nothing was changed."
					}
					wantHas(t, what+" error", env["error"], nothing)
					return true
				})
				continue
			}
			env, isErr := m.Call(args)
			envelopeOK(what, a, env, isErr)
			if code, _ := env["code"].(string); code == domain.CodeDisabled || code == domain.CodeAuth || code == domain.CodeInternal {
				t.Errorf("%s: refused with %s: %v", what, code, env)
			}
			if !on && env["ok"] != true {
				t.Errorf("%s: exempt from R4.2 (R10.4) but failed: %v", what, env)
			}
			if on {
				c, _ := env["code"].(string)
				if c == "" {
					c = "ok"
				}
				onCodes[a.String()] = c
			}
		}

		// The owner token on the owner API: never 401 (ids that do not exist, so
		// nothing changes; PATCH /settings writes the value it already has).
		for _, rt := range ownerRoutes {
			row := routes[rt]
			method := strings.SplitN(rt, " ", 2)[0]
			body := row.ownerBody
			if rt == "PATCH /api/v1/settings" {
				body = map[string]any{"agent_sessions": on}
			}
			st, resp := mxRequest(t, method, r.URL+row.ownerPath, OwnerToken, nil, body)
			if st == http.StatusUnauthorized || (st >= 500 && st != http.StatusNotImplemented) {
				t.Errorf("%s: %s %s with the owner token: status %d: %.200s", phase, method, row.ownerPath, st, resp)
			}
		}
	}

	keys := make([]string, 0, len(onCodes))
	for k := range onCodes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, onCodes[k])
	}
	t.Logf("%d actions, %d owner API routes, %d refused calls checked against a Redis dump, %s; with agent sessions on:%s",
		len(enum), len(ownerRoutes), refusedCalls, time.Since(start).Round(time.Millisecond), b.String())
}
