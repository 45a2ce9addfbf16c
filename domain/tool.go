package domain

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay/store"
)

// caller is the session whose agent makes a call.
type caller struct {
	s    *store.Session
	turn *store.Turn // its running turn, nil outside a turn
	// remote is set when the caller is an agent on a paired relay (a peer
	// call, R13.1): s is then a stand-in record named after it, and its
	// cards were asked on its own relay.
	remote *PeerOrigin
	// delivery settles whether the call's result reached the client (nil:
	// when CallTool returns, see [Delivery]).
	delivery *Delivery
	// reach, for a paired relay's agent whose peer token has scope
	// "started", is the sessions it reaches (R18.35); nil: every session.
	reach *peerReach
}

// origin is the chain the caller's prompts continue (R4.7).
func (c *caller) origin(self string) store.Origin {
	if c.remote != nil {
		path := slices.Clone(c.remote.Path)
		if len(path) == 0 || !strings.EqualFold(path[len(path)-1], c.remote.Relay) {
			path = append(path, c.remote.Relay)
		}
		return store.Origin{Path: append(path, self), Unlocked: slices.Clone(c.remote.Unlocked)}
	}
	if c.turn != nil && len(c.turn.Origin.Path) > 0 {
		return c.turn.Origin
	}
	return store.Origin{Path: []string{self}}
}

// result is an action's success: its typed fields (see toolresults.go), or
// a paired relay's answer as it wrote them, plus what the summary names.
type result struct {
	body    any                        // the action's typed fields: a struct, nil for none
	raw     map[string]json.RawMessage // a paired relay's answer (remote calls): its fields as it encoded them
	relay   string                     // the envelope's relay, when set
	summary string                     // the envelope's summary, when set (a paired relay's answer keeps its own)
	ignored []string                   // the envelope's ignored arguments
	session string                     // target session id for the summary
	task    string
	what    string
	remote  string // the paired relay that did it (its envelope keeps its own summary)
}

func newResult(session, what string) *result {
	return &result{session: session, what: what}
}

// with sets the result's typed fields.
func (r *result) with(body any) *result { r.body = body; return r }

// status is the result's status, "" for none (the 🛰️ line's outcome, R23.3).
func (r *result) status() string {
	if s, ok := r.body.(statused); ok {
		return s.resultStatus()
	}
	var st string
	if v, ok := r.raw["status"]; ok {
		_ = json.Unmarshal(v, &st) // a status of another type is none
	}
	return st
}

// fields are the result's JSON fields with the envelope's relay, summary
// and ignored (ok is the envelope's own).
func (r *result) fields() (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if r.body != nil {
		f, err := jsonFields(r.body)
		if err != nil {
			return nil, err
		}
		if f != nil {
			out = f
		}
	}
	for k, v := range r.raw {
		out[k] = v
	}
	add := func(k string, v any) error {
		b, err := json.Marshal(v)
		out[k] = b
		return err
	}
	var err error
	if r.relay != "" {
		err = add("relay", r.relay)
	}
	if r.summary != "" && err == nil {
		err = add("summary", r.summary)
	}
	if len(r.ignored) > 0 && err == nil {
		err = add("ignored", r.ignored)
	}
	return out, err
}

type handler func(ctx context.Context, c *caller, a *args) (*result, *Error)

// handlers are the registry's handlers on this relay, by action.
func (r *Relay) handlers() map[string]handler {
	out := make(map[string]handler, len(actionList))
	for _, s := range actionList {
		out[s.name] = s.run(r)
	}
	return out
}

// CallTool runs one relay_tool call as the session callerID and returns the
// result envelope (R3.1–R3.3) and whether it is a failure.
func (r *Relay) CallTool(ctx context.Context, callerID string, raw json.RawMessage, d *Delivery) (json.RawMessage, bool) {
	start := time.Now()
	action := "unknown"
	var (
		out *result
		e   *Error
	)
	r.warm.call(func() { out, e = r.call(ctx, callerID, raw, d, &action) })
	if e != nil && (specOf(action).updates || action == "unknown" && specOf(peekAction(raw)).updates) {
		e = changedNotDone(e)
	}
	return r.envelope(action, callerID, start, out, e)
}

// envelope renders an action's outcome as the result envelope and counts it.
func (r *Relay) envelope(action, callerID string, start time.Time, out *result, e *Error) (json.RawMessage, bool) {
	env := map[string]json.RawMessage{}
	code := "ok"
	if e != nil {
		code = e.Code
		if e.ServerFault() {
			r.log.Error("relay_tool failed", "action", action, "session", callerID, "err", e.cause)
		}
		errorEnvelope(env, e)
	} else if fields, err := out.fields(); err != nil {
		r.log.Error("encode result", "err", err)
		return []byte(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"The result could not be encoded. Nothing was done."}`), true
	} else {
		env = fields
		env["ok"] = json.RawMessage("true")
	}
	if r.met != nil {
		if !isAction(action) {
			action = "unknown"
		}
		if code != "ok" && !KnownCode(code) {
			code = CodeInternal // labels come only from the closed set (R18.32)
		}
		r.met.ToolCall(action, code, time.Since(start))
	}
	b, err := json.Marshal(env)
	if err != nil {
		r.log.Error("encode result", "err", err)
		b = []byte(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"The result could not be encoded. Nothing was done."}`)
		return b, true
	}
	return b, e != nil
}

// errorEnvelope fills env with a failed result: the error's fields, ok,
// code and error, each encoded.
func errorEnvelope(env map[string]json.RawMessage, e *Error) {
	for k, v := range e.Fields {
		env[k] = v
	}
	env["ok"], env["code"], env["error"] = json.RawMessage("false"), mustJSON(e.Code), mustJSON(e.Msg)
}

func (r *Relay) call(ctx context.Context, callerID string, raw json.RawMessage, d *Delivery, action *string) (*result, *Error) {
	a, e := parseArgs(raw)
	// R3.4a: the one check before all others, even before argument shapes.
	if answersAnAsk(raw, a) {
		*action = actAnswerQuestion
		r.usage.noteEarly(ctx, callerID, raw, CodeForbidden)
		return nil, Errorf(CodeForbidden, "Only the owner answers asks; answer_question answers question cards (q_…). Nothing was sent.")
	}
	if e != nil {
		r.usage.noteEarly(ctx, callerID, raw, e.Code)
		return nil, e
	}
	*action = a.action
	// The caller and, when `session` is a whole id, that session: one round trip.
	ref, _ := a.str("session")
	c, pre, err := r.loadCall(ctx, callerID, normRef(ref))
	if err != nil {
		return nil, AsError(err)
	}
	a.pre = pre
	c.delivery = d
	line := r.usage.noteCall(ctx, c, raw, "") // the 🛰️ line, once per call (R17.3)
	res, e := r.callChecked(ctx, c, a)
	r.usage.noteOutcome(ctx, c, line, res, e) // and the call's outcome on it (R23.3)
	return res, e
}

// callChecked runs a call whose caller is read: on the relay it names, or
// on this one.
func (r *Relay) callChecked(ctx context.Context, c *caller, a *args) (*result, *Error) {
	p, pv, e := r.checkRelay(ctx, c, a)
	if e != nil {
		return nil, e
	}
	if p != nil {
		res, e := r.remote.remoteCall(ctx, c, a, p, pv)
		if e != nil {
			return nil, e
		}
		res.relay = p.Name
		res.ignored = a.ignored
		return res, nil
	}
	return r.runLocal(ctx, c, a)
}

// answersAnAsk reports whether a call is answer_question with an ask's id
// (ask_…), from its parsed arguments a, or from raw when they did not parse.
func answersAnAsk(raw json.RawMessage, a *args) bool {
	var q any
	if a != nil {
		v, ok := a.m["question_id"]
		if a.action != actAnswerQuestion || !ok || json.Unmarshal(v, &q) != nil {
			return false
		}
	} else {
		var peek struct {
			Action     string `json:"action"`
			QuestionID any    `json:"question_id"`
		}
		if json.Unmarshal(raw, &peek) != nil || peek.Action != actAnswerQuestion {
			return false
		}
		q = peek.QuestionID
	}
	s, ok := q.(string)
	return ok && strings.HasPrefix(s, "ask_")
}

// runLocal runs a checked action on this relay and completes its result.
func (r *Relay) runLocal(ctx context.Context, c *caller, a *args) (*result, *Error) {
	res, e := r.handler[a.action](ctx, c, a)
	if e != nil {
		return nil, e
	}
	if a.spec().relay != relayNone {
		res.relay = r.opts.Name
		res.summary = r.summary(a.action, res)
	} else {
		res.summary = a.action + ": " + res.what
	}
	res.ignored = a.ignored
	return res, nil
}

func (r *Relay) summary(action string, res *result) string {
	var b strings.Builder
	b.WriteString(action)
	b.WriteString(" → ")
	b.WriteString(r.opts.Name)
	if res.session != "" {
		b.WriteString(" session ")
		b.WriteString(id8(res.session))
	}
	if res.task != "" {
		b.WriteString(" task ")
		b.WriteString(id8(res.task))
	}
	b.WriteString(": ")
	b.WriteString(res.what)
	return b.String()
}

func id8(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// loadCall reads the caller (its session and running turn) and, when ref is
// a whole session id, resolves and reads that session too (the action's
// target, see [Relay.target]), in one round trip.
func (r *Relay) loadCall(ctx context.Context, sid, ref string) (*caller, *store.Call, error) {
	lc, err := r.st.LoadCall(ctx, sid, ref)
	if err != nil {
		return nil, nil, err
	}
	if lc.Caller == nil {
		return nil, nil, Errorf(CodeNotFound, "The calling session no longer exists. Nothing was done.")
	}
	if lc.Caller.Archived {
		// Its token was revoked (R18.2); a process that still knew it refuses too.
		return nil, nil, Errorf(CodeForbidden, "The calling session is archived; its token no longer works. Nothing was done.")
	}
	c := &caller{s: lc.Caller}
	if lc.Turn != nil && lc.Turn.Status == store.TurnRunning {
		c.turn = lc.Turn
	}
	if !lc.Looked {
		return c, nil, nil
	}
	return c, lc, nil
}

// checkRelay resolves `relay` and applies R4.2 (R3.4a: relay checks come
// right after argument shapes). It returns the pairing when `relay` names a
// paired relay.
func (r *Relay) checkRelay(ctx context.Context, c *caller, a *args) (*store.Pairing, *peerState, *Error) {
	if a.spec().relay == relayNone {
		return nil, nil, nil
	}
	name, e := a.str("relay")
	if e != nil {
		return nil, nil, e
	}
	if name == "" {
		if a.spec().relay != relayOptional {
			return nil, nil, Errorf(CodeInvalidInput, `relay is required; use "this" for this relay. Nothing was done.`)
		}
		name = "this"
	}
	if !strings.EqualFold(name, "this") && !strings.EqualFold(name, r.opts.Name) {
		return r.pairedRelay(ctx, c, name)
	}
	// R4.2: agent sessions are off until the owner turns them on.
	if a.ownAsks() { // the caller's own asks to the owner
		return nil, nil, nil
	}
	st, err := r.settings(ctx)
	if err != nil {
		return nil, nil, internal("checkRelay: settings", err)
	}
	if !st.AgentSessions {
		return nil, nil, Errorf(CodeDisabled, "Agent sessions are off on relay %q: the owner has not turned on agent sessions there. Ask the owner to turn them on. Nothing was done.", r.opts.Name)
	}
	return nil, nil, nil
}

// pairedRelay finds the paired relay a call names, with what the call reads
// once of the pairings and of the relays unlocked in the caller's
// conversation (remoteCall, chain).
func (r *Relay) pairedRelay(ctx context.Context, c *caller, name string) (*store.Pairing, *peerState, *Error) {
	un, ps, err := r.st.UnlockState(ctx, c.s.ID)
	if err != nil {
		return nil, nil, internal("checkRelay: UnlockState", err)
	}
	p, e := findPairing(ps, name)
	if e != nil {
		return nil, nil, e
	}
	if p == nil {
		known := []string{r.opts.Name}
		for _, p := range ps {
			known = append(known, p.Name)
		}
		return nil, nil, Errorf(CodeUnknownRelay, "No paired relay is named %q. Call list_relays to see the relays you can use (\"this\" is this relay). Nothing was done.", name).
			With("relays", known)
	}
	return p, &peerState{unlock: un, pairings: ps}, nil
}

// changedNotDone words a refused update_session as the action does: every
// failure ends "Nothing was changed.", also one of the checks all actions
// share (argument shapes, the relay, the target; R3.3, R7.10).
func changedNotDone(e *Error) *Error {
	if !strings.HasSuffix(e.Msg, nothingDone) {
		return e
	}
	c := *e
	c.Msg = strings.TrimSuffix(e.Msg, nothingDone) + nothingChanged
	return &c
}

// peekAction is the action a call names, "" when it names none.
func peekAction(raw json.RawMessage) string {
	var p struct {
		Action any `json:"action"`
	}
	_ = json.Unmarshal(raw, &p)
	s, _ := p.Action.(string)
	return s
}
