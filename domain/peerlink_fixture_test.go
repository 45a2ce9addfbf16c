package domain

// Domain fixtures linked in-process (issue 24): a PeerClient that takes a
// request for a paired relay straight to that relay's serving methods
// (PeerHello, PeerCall, PeerCheck, PeerEventsFor, PeerInbox, PeerAnswer),
// as the api's /peer/v1 handlers call them: the bearer token is checked
// first (PeerTokenValid, 401 otherwise), bodies and answers go through JSON
// so the wire types are exercised, and an answer is read the way package
// peer's client reads an HTTP one (a 401 is REMOTE_RELAY_AUTH, a text 404
// REMOTE_RELAY_UNSUPPORTED, an error body {error, code} keeps its code).
// Each linked relay runs its jobs as they come (actAuto), since a call from
// one relay's turn waits on the other's. relaytest keeps the tests that
// need real HTTP between relays (peer_smoke_test.go, peer_process_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/peer"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// peerNet is the relays of one test, by base URL, and the PeerClient each
// of them is built with.
type peerNet struct {
	t    testing.TB
	mu   sync.Mutex
	ends map[string]*peerEnd
}

// peerEnd is one linked relay: its fixture, name and base URL, and what the
// test makes of the way to it.
type peerEnd struct {
	*fixture
	name, url string
	// down drops every request to this relay without an answer (a relay
	// that went away, a cut link).
	down atomic.Bool

	mu sync.Mutex
	// hello changes the hello this relay answers (an older relay's version
	// and features); nil: its own. Set with setHello.
	hello func(*Hello)
	// answer, when set, answers a request to route ("/peer/v1/check", …)
	// in this relay's place: ok false passes it on to the relay. Set with
	// setAnswer.
	answer func(route string, body []byte) (status int, contentType string, raw []byte, ok bool)
	calls  map[string]int // POST /peer/v1/call requests by action
	asks   []peerPoll     // list_questions calls (an ask's answer poll, R10.5)
}

// setHello makes e answer hello as h changes it (the relay's pollers may
// be reading it meanwhile).
func (e *peerEnd) setHello(h func(*Hello)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hello = h
}

// setAnswer makes e answer requests as a does in its place.
func (e *peerEnd) setAnswer(a func(route string, body []byte) (int, string, []byte, bool)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.answer = a
}

// peerPoll is one list_questions call that came to a relay.
type peerPoll struct {
	at   time.Time
	down bool
}

// peerEndOptions changes the relay a linked fixture builds.
type peerEndOptions struct {
	settings   func(*config.Settings)
	limits     func(*config.Limits)
	timing     func(*config.Timing)
	providers  []provider.Info // the scripted providers (nil: the default one)
	maxWaitCap time.Duration
	start      time.Time
	work       bool    // fixtureOptions.work: the durations of work on a Sim the test moves (pass)
	metrics    Metrics // the relay's counts (nil: none)
}

func newPeerNet(t testing.TB) *peerNet {
	return &peerNet{t: t, ends: map[string]*peerEnd{}}
}

// relay builds and starts the relay name on 127.0.0.1 (its own port), with
// agent sessions on, polls of paired relays every 20 ms and its jobs run as
// they come.
func (n *peerNet) relay(name string, o peerEndOptions) *peerEnd {
	t := n.t
	t.Helper()
	n.mu.Lock()
	e := &peerEnd{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", 17100+len(n.ends)), calls: map[string]int{}}
	n.ends[e.url] = e
	n.mu.Unlock()

	f := newFixture(t, fixtureOptions{
		settings: func(st *config.Settings) {
			st.AgentSessions = true
			if o.settings != nil {
				o.settings(st)
			}
		},
		limits: o.limits,
		timing: func(tm *config.Timing) {
			tm.PeerPoll = 20 * time.Millisecond
			if o.timing != nil {
				o.timing(tm)
			}
		},
		start: o.start, name: name, baseURL: e.url, scripted: o.providers, maxWaitCap: o.maxWaitCap, peers: n, work: o.work, metrics: o.metrics,
	})
	e.fixture = f
	actAuto(f)
	return e
}

// token makes a peer token on e as its owner does (POST /api/v1/peer-tokens).
func (e *peerEnd) token() string {
	e.t.Helper()
	tok, err := e.r.NewPeerToken(e.ctx, "", "")
	if err != nil {
		e.t.Fatalf("peer token on %s: %v", e.name, err)
	}
	return tok.Token
}

// pair pairs e with to as the owners do: a peer token made on to, the
// pairing made on e with to's URL (and req's name and permission). It
// returns the token.
func (e *peerEnd) pair(to *peerEnd, req PairRequest) string {
	e.t.Helper()
	req.URL, req.Token = to.url, to.token()
	p, err := e.r.Pair(e.ctx, req)
	if err != nil {
		e.t.Fatalf("pair %s with %s: %v", e.name, to.name, err)
	}
	if !p.Online {
		e.t.Fatalf("pair %s with %s: offline %+v", e.name, to.name, p)
	}
	return req.Token
}

// count is how many /peer/v1/call requests for action reached e.
func (e *peerEnd) count(action string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[action]
}

// polls is the list_questions calls that reached e so far.
func (e *peerEnd) polls() []peerPoll {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]peerPoll(nil), e.asks...)
}

// serve takes one request to route on the relay at to and reads its
// answer into out as package peer's client reads an HTTP answer. h is the
// handler's part once the token passed; it answers the status and body.
func (n *peerNet) serve(ctx context.Context, to peer.Target, route string, body any, timeout time.Duration, out any,
	h func(ctx context.Context, e *peerEnd, tok string, raw []byte) (int, []byte)) error {
	n.mu.Lock()
	// localhost is 127.0.0.1: another host of the same relay.
	e := n.ends[strings.Replace(strings.TrimRight(to.URL, "/"), "//localhost:", "//127.0.0.1:", 1)]
	n.mu.Unlock()
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode the body of %s: %w", route, err)
		}
	}
	if e == nil {
		return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q does not answer (connection refused). Nothing was done.", to.Name)}
	}
	if route == "/peer/v1/call" {
		var cb PeerCallBody
		_ = json.Unmarshal(raw, &cb)
		e.mu.Lock()
		e.calls[cb.Action]++
		if cb.Action == "list_questions" {
			e.asks = append(e.asks, peerPoll{at: time.Now(), down: e.down.Load()})
		}
		e.mu.Unlock()
	}
	e.mu.Lock()
	answer := e.answer
	e.mu.Unlock()
	if e.down.Load() {
		return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q does not answer (EOF). Nothing was done.", to.Name)}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	status, ctype, ans := 0, "application/json; charset=utf-8", []byte(nil)
	answered := false
	if answer != nil {
		var st int
		var ct string
		var b []byte
		if st, ct, b, answered = answer(route, raw); answered {
			status, ctype, ans = st, ct, b
		}
	}
	if !answered {
		// The peer routes' auth (api/peer.go): a token this relay did not issue is 401.
		ok, err := e.r.PeerTokenValid(ctx, to.Token)
		switch {
		case err != nil:
			status, ans = http.StatusServiceUnavailable, errorBody(Errorf(CodeInternal, "The relay cannot check the token right now."))
		case !ok:
			status, ans = http.StatusUnauthorized, errorBody(Errorf(CodeAuth, "This is not a peer token of this relay."))
		default:
			status, ans = h(ctx, e, to.Token, raw)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q did not answer within %s. Nothing was done there, as far as this relay knows.", to.Name, timeout.Round(time.Second))}
	}
	// What package peer's client makes of the answer (peer/client.go do).
	isJSON := strings.HasPrefix(ctype, "application/json")
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return &peer.Error{Code: CodeAuth, Msg: fmt.Sprintf("Relay %q rejects this relay's peer token (HTTP %d). The owner must pair it again with a new token from that relay. Nothing was done.", to.Name, status)}
	case status == http.StatusNotFound && !isJSON:
		return &peer.Error{Code: CodeUnsupported, Msg: fmt.Sprintf("Relay %q does not serve the peer protocol at %s (HTTP 404): it may run an older relay and need an update. Nothing was done.", to.Name, route)}
	case !isJSON:
		return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q answered with something that is not a relay's answer (HTTP %d, %s). Check the pairing's URL. Nothing is known to have been done.", to.Name, status, ctype)}
	}
	if status >= 300 {
		var eb struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(ans, &eb) == nil && eb.Code != "" {
			return &peer.Error{Code: eb.Code, Msg: fmt.Sprintf("Relay %q: %s", to.Name, eb.Error)}
		}
		return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q answered HTTP %d. Nothing is known to have been done.", to.Name, status)}
	}
	if err := json.Unmarshal(ans, out); err != nil {
		return &peer.Error{Code: CodeOffline, Msg: fmt.Sprintf("Relay %q answered with JSON this relay cannot read (%v). Nothing is known to have been done.", to.Name, err)}
	}
	return nil
}

// errorBody is the api's error answer {error, code, …fields} (api/owner.go fail).
func errorBody(err error) []byte {
	e := AsError(err)
	m := map[string]any{"error": e.Msg, "code": e.Code}
	for k, v := range e.Fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// answerOf is a handler's JSON answer: 200 with v, or the error's status and body.
func answerOf(v any, err error) (int, []byte) {
	if err != nil {
		return HTTPStatus(AsError(err).Code), errorBody(err)
	}
	b, mErr := json.Marshal(v)
	if mErr != nil {
		return http.StatusInternalServerError, errorBody(internal("encode the answer", mErr))
	}
	return http.StatusOK, b
}

func (n *peerNet) Hello(ctx context.Context, to peer.Target, timeout time.Duration) (*peer.Hello, error) {
	var h peer.Hello
	err := n.serve(ctx, to, "/peer/v1/hello", nil, timeout, &h, func(ctx context.Context, e *peerEnd, _ string, _ []byte) (int, []byte) {
		h, err := e.r.PeerHello(ctx)
		e.mu.Lock()
		change := e.hello
		e.mu.Unlock()
		if err == nil && change != nil {
			change(&h)
		}
		return answerOf(h, err)
	})
	if err != nil {
		return nil, err
	}
	return &h, nil
}

func (n *peerNet) CallRaw(ctx context.Context, to peer.Target, body peer.CallBody, timeout time.Duration) (map[string]json.RawMessage, error) {
	var env map[string]json.RawMessage
	err := n.serve(ctx, to, "/peer/v1/call", body, timeout, &env, func(ctx context.Context, e *peerEnd, tok string, raw []byte) (int, []byte) {
		out, _ := e.r.PeerCall(ctx, tok, raw)
		return http.StatusOK, out
	})
	if err != nil {
		return nil, err
	}
	return env, nil
}

func (n *peerNet) Check(ctx context.Context, to peer.Target, body peer.CallBody, timeout time.Duration) (map[string]json.RawMessage, error) {
	var env map[string]json.RawMessage
	err := n.serve(ctx, to, "/peer/v1/check", body, timeout, &env, func(ctx context.Context, e *peerEnd, tok string, raw []byte) (int, []byte) {
		return http.StatusOK, e.r.PeerCheck(ctx, tok, raw)
	})
	if err != nil {
		return nil, err
	}
	return env, nil
}

func (n *peerNet) Events(ctx context.Context, to peer.Target, sub, after string, wait, timeout time.Duration) (*peer.Events, error) {
	var out peer.Events
	err := n.serve(ctx, to, "/peer/v1/events", nil, timeout, &out, func(ctx context.Context, e *peerEnd, tok string, _ []byte) (int, []byte) {
		if sub == "" {
			return answerOf(nil, Errorf(CodeInvalidInput, "subscription is required."))
		}
		secs := int(wait / time.Second) // the query's whole seconds
		evs, err := e.r.PeerEventsFor(ctx, tok, sub, after, time.Duration(secs)*time.Second)
		if err != nil && AsError(err).Code == CodeAuth {
			return http.StatusUnauthorized, errorBody(Errorf(CodeAuth, "This is not a peer token of this relay."))
		}
		return answerOf(evs, err)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func (n *peerNet) Inbox(ctx context.Context, to peer.Target, timeout time.Duration) ([]map[string]json.RawMessage, error) {
	var out struct {
		Asks []map[string]json.RawMessage `json:"asks"`
	}
	err := n.serve(ctx, to, "/peer/v1/inbox", nil, timeout, &out, func(ctx context.Context, e *peerEnd, tok string, _ []byte) (int, []byte) {
		list, err := e.r.PeerInbox(ctx, tok)
		return answerOf(map[string]any{"asks": list}, err)
	})
	if err != nil {
		return nil, err
	}
	return out.Asks, nil
}

func (n *peerNet) AnswerInbox(ctx context.Context, to peer.Target, id string, in peer.InboxAnswer, timeout time.Duration) (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	err := n.serve(ctx, to, "/peer/v1/inbox/"+id, in, timeout, &out, func(ctx context.Context, e *peerEnd, tok string, raw []byte) (int, []byte) {
		var body struct {
			InboxAnswer
			Via string `json:"via"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return answerOf(nil, Errorf(CodeInvalidInput, "The body is not valid JSON for this request: %v. Nothing was done.", err))
		}
		res, err := e.r.PeerAnswer(ctx, tok, id, body.InboxAnswer, body.Via)
		return answerOf(res, err)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// peerRaw sends body to route (call or check) on e with tok, through the
// token check, and returns the status and the decoded answer.
func (e *peerEnd) peerRaw(route, tok string, body any) map[string]any {
	_, env := e.peerStatus(route, tok, body)
	return env
}

// peerStatus is peerRaw with the HTTP status the api would answer.
func (e *peerEnd) peerStatus(route, tok string, body any) (int, map[string]any) {
	raw, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []byte
	ok, err := e.r.PeerTokenValid(e.ctx, tok)
	switch {
	case err != nil:
		e.t.Fatalf("token check on %s: %v", e.name, err)
	case !ok:
		return http.StatusUnauthorized, map[string]any{"error": "This is not a peer token of this relay.", "code": CodeAuth}
	case route == "/peer/v1/check":
		out = e.r.PeerCheck(e.ctx, tok, raw)
	default:
		out, _ = e.r.PeerCall(e.ctx, tok, raw)
	}
	var env map[string]any
	if err := json.Unmarshal(out, &env); err != nil {
		e.t.Fatalf("answer of %s on %s: %s: %v", route, e.name, out, err)
	}
	return http.StatusOK, env
}

// linkCard is a card the owner saw while a turn ran.
type linkCard struct {
	action, target, lines string
}

// runDecide writes a script of steps as the owner in sid and, while its
// turn runs, gives every card it asks decide's answer. It returns the tool
// results in order and the cards.
func (e *peerEnd) runDecide(sid, decide string, steps ...map[string]any) ([]map[string]any, []linkCard) {
	e.t.Helper()
	mid := e.prompt(sid, script(steps...))
	var cards []linkCard
	seen := map[string]bool{}
	e.actUntil("the turn of "+sid, func() bool {
		for _, c := range e.actCards(sid) {
			if seen[c.ID] {
				continue
			}
			seen[c.ID] = true
			target := ""
			if c.Target != nil {
				target = *c.Target
			}
			cards = append(cards, linkCard{action: c.Action, target: target, lines: strings.Join(c.Lines, "\n")})
			if _, err := e.r.DecideCard(e.ctx, c.ID, decide); err != nil {
				e.t.Fatalf("decide %s: %v", c.ID, err)
			}
		}
		tr, err := e.r.Turn(e.ctx, mid)
		if err != nil {
			e.t.Fatalf("turn %s: %v", mid, err)
		}
		return tr.Status.Ended()
	})
	n := 0
	for _, st := range steps {
		if _, ok := st["tool"]; ok {
			n++
		}
	}
	res := e.toolResults(mid)
	if len(res) != n {
		e.t.Fatalf("the turn's reply holds %d tool results, want %d", len(res), n)
	}
	return res, cards
}

// runAllow is runDecide allowing every card: the tool results.
func (e *peerEnd) runAllow(sid string, steps ...map[string]any) []map[string]any {
	e.t.Helper()
	res, _ := e.runDecide(sid, "allow", steps...)
	return res
}

// newSession creates a session as the owner; text, when given, is its first prompt.
func (e *peerEnd) newSession(in NewSession) string {
	e.t.Helper()
	sid := e.session(in)
	if in.Text != "" {
		e.quiet()
	}
	return sid
}

// say queues text in sid as the owner and waits for the turn's end.
func (e *peerEnd) say(sid, text string) *store.Turn {
	e.t.Helper()
	return e.actTurn(e.prompt(sid, text))
}

// quiet waits until no session of e has a turn running or queued.
func (e *peerEnd) quiet() {
	e.t.Helper()
	e.actUntil(e.name+" to be quiet", func() bool {
		list, _, err := e.r.SessionList(e.ctx, "all", 1000)
		if err != nil {
			e.t.Fatalf("sessions: %v", err)
		}
		for _, s := range list {
			if s.State != "idle" && !s.Archived {
				return false
			}
		}
		return true
	})
}

// detail is the owner's view of a session (GET /api/v1/sessions/{id}).
func (e *peerEnd) detail(sid string) map[string]any {
	e.t.Helper()
	d, err := e.r.OwnerSession(e.ctx, sid, 0)
	if err != nil {
		e.t.Fatalf("session %s on %s: %v", sid, e.name, err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		e.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// sessionCount is the number of sessions of every scope.
func (e *peerEnd) sessionCount() int {
	e.t.Helper()
	list, _, err := e.r.SessionList(e.ctx, "all", 1000)
	if err != nil {
		e.t.Fatalf("sessions: %v", err)
	}
	return len(list)
}

// setAccept turns the owner's accept_agent_prompts setting on or off.
func (e *peerEnd) setAccept(on bool) {
	e.t.Helper()
	st, err := e.r.PatchSettings(e.ctx, SettingsPatch{AcceptAgentPrompts: &on})
	if err != nil || st.AcceptAgentPrompts != on {
		e.t.Fatalf("accept_agent_prompts %v: %+v %v", on, st, err)
	}
}

// state fingerprints what another relay's agents could change on e: the
// sessions (all scopes), their messages, the open asks, the pending cards
// and the subscriptions a paired relay's conversation holds there.
func (e *peerEnd) state(peerWatcher string) []string {
	e.t.Helper()
	list, _, err := e.r.SessionList(e.ctx, "all", 1000)
	if err != nil {
		e.t.Fatalf("sessions: %v", err)
	}
	var lines []string
	for _, s := range list {
		lines = append(lines, fmt.Sprintf("session %s title=%v archived=%v state=%v mode=%v model=%v messages=%d",
			s.ID, s.Title, s.Archived, s.State, s.Mode, s.Model, e.messages(s.ID)))
	}
	asks, err := e.r.Inbox(e.ctx)
	if err != nil {
		e.t.Fatalf("inbox: %v", err)
	}
	for _, a := range asks {
		lines = append(lines, fmt.Sprintf("ask %v %v", a.ID, a.Status))
	}
	cards, err := e.r.Cards(e.ctx)
	if err != nil {
		e.t.Fatalf("cards: %v", err)
	}
	lines = append(lines, fmt.Sprintf("cards %d", len(cards)))
	subs, err := e.st.WatcherSubscriptions(e.ctx, peerWatcher)
	if err != nil {
		e.t.Fatalf("subscriptions: %v", err)
	}
	for _, s := range subs {
		lines = append(lines, fmt.Sprintf("sub %s ended=%q", s.ID, s.EndReason))
	}
	slices.Sort(lines)
	return lines
}

// linkCode is a result's code: "ok" for a success.
func linkCode(res map[string]any) string {
	if res["ok"] == true {
		return "ok"
	}
	c, _ := res["code"].(string)
	return c
}

// linkErr is a result's error sentence.
func linkErr(res map[string]any) string {
	s, _ := res["error"].(string)
	return s
}

// onRelay is a scripted step calling relay_tool with action on relay and args.
func onRelay(relay, action string, args map[string]any) map[string]any {
	m := map[string]any{"action": action, "relay": relay}
	for k, v := range args {
		m[k] = v
	}
	return actTool(m)
}

// linkResults are the relay_tool envelopes a scripted reply's text holds
// (a nested call's reply, as read_session or send show it).
func linkResults(reply string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(reply, "\n") {
		var m map[string]any
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &m) == nil {
			if _, ok := m["ok"]; ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// events are the texts of sid's event messages, oldest first.
func (e *peerEnd) events(sid string) []string {
	e.t.Helper()
	var out []string
	for _, m := range e.history(sid, "event") {
		out = append(out, m.Text)
	}
	return out
}

// asJSON is v as JSON decodes it into maps (what the api would answer).
func asJSON(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
