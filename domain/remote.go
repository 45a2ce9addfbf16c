package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// Actions on a paired relay, on the caller's side (§4, R13.1): the lock of
// the conversation, the pairing's permission level, the hop limit and the
// cards are checked here, before the call is sent; the paired relay then
// applies its own rules (accept setting, hop limit, caps, limits).

// remote is a tool call to a paired relay on the caller's side (remote.go)
// and the mirror records such calls leave here (mirrors.go): a remote
// subscription's mirror, the asks put there, what ends them. The link
// (peerLink) sends the requests; the cards are asked through the cards.
type remote struct {
	st    remoteStore
	now   func() time.Time
	log   *slog.Logger
	opts  *Options // the relay's: name, limits
	link  *peerLink
	cards *cards
	subs  *subscriptions
	turns *turnQueue // the wait argument (waitArg)
	relay remoteHost
}

// remoteStore is the store as the remote calls see it.
type remoteStore interface {
	recordStore
	peerStore
	mirrorStore
}

// remoteHost is what a remote call asks of the rest of the relay: the
// target session of a call that names one here (sessions.go), the check on
// the paired relay before a card (peercheck.go) and telling the console
// (notify.go).
type remoteHost interface {
	targets
	checkThere(ctx context.Context, p *store.Pairing, body PeerCallBody) (*PeerChecked, *Error)
	notify(ctx context.Context, what string)
	ownerNotice(ctx context.Context, event, sid, title, text string)
}

// The doors other subsystems' hosts reach the mirrors by (peerLinkHost,
// subscriptionsHost).

// Permission levels of a pairing (R4.5).
var levelRank = map[string]int{"none": 0, "read": 1, "prompt": 2, "full": 3}

// Levels lists the permission levels, lowest first.
var Levels = []string{"none", "read", "prompt", "full"}

// neededLevel is the lowest level that allows an action (R4.5's table).
func neededLevel(a *args) string { return firstNonEmpty(a.spec().level, "full") }

// promptsAgent reports an action that carries a prompt to another agent (hop limit, R4.7).
func promptsAgent(a *args) bool { return a.spec().prompt || a.intoSession() }

// hopCheck applies R4.7 to a prompt of the chain o going to relay target
// (its own name): a chain that already holds two relays goes on only to a
// relay the owner unlocked where the chain began (never back to its start).
func hopCheck(o store.Origin, target string, hops int) *Error {
	if hops < 1 {
		hops = 2
	}
	if len(o.Path) < hops {
		return nil
	}
	if !strings.EqualFold(o.Path[0], target) && slices.ContainsFunc(o.Unlocked, func(u string) bool { return strings.EqualFold(u, target) }) {
		return nil
	}
	return Errorf(CodeHopLimit, "This prompt's chain has already been on %d relays (%s); it may go on to relay %q only if the owner unlocked %q by mentioning it in the conversation where the chain began. Nothing was sent.",
		len(o.Path), strings.Join(o.Path, " → "), target, target)
}

// chain is the origin the caller's prompts carry (R4.7): the relays the
// chain has been on, and the relays the owner unlocked by mention where it
// began, by the names they give themselves. An owner's message stamps them
// into its turn's origin (OwnerMessage), and a turn an agent here started
// inherits its starter's, so a chain keeps them across local hops; a turn
// that began here otherwise (an event, a schedule, a call outside a turn)
// takes this conversation's mentions as the call read them (pv).
func (rm *remote) chain(c *caller, pv *peerState) store.Origin {
	o := c.origin(rm.opts.Name)
	if c.remote != nil || len(o.Path) != 1 || !strings.EqualFold(o.Path[0], rm.opts.Name) || len(o.Unlocked) > 0 {
		return o
	}
	if c.turn != nil && c.turn.Caller != "" {
		return o // an agent here started this turn: the chain began in its starter's conversation
	}
	o.Unlocked = pv.mentioned()
	return o
}

// mentionedRelays are the paired relays the owner mentioned in a
// conversation (not those unlocked because their agent wrote there, R4.4 b),
// by the names they give themselves.
func (rm *remote) mentionedRelays(ctx context.Context, sid string) []string {
	un, ps, err := rm.st.UnlockState(ctx, sid) // one round trip
	if err != nil {
		return nil
	}
	return (&peerState{unlock: un, pairings: ps}).mentioned()
}

// peerState is what a call read once of the pairings and of the relays
// unlocked in the caller's conversation (store.UnlockState).
type peerState struct {
	unlock   map[string]string // lower-case local name → "owner" | "agent"
	pairings []*store.Pairing
}

// unlocked reports whether the paired relay is unlocked in the conversation (R4.4).
func (v *peerState) unlocked(p *store.Pairing) bool {
	return v.unlock[strings.ToLower(p.Name)] != ""
}

// mentioned lists the relays the owner mentioned, by the names they give themselves (R4.7).
func (v *peerState) mentioned() []string {
	var out []string
	for _, p := range v.pairings {
		if v.unlock[strings.ToLower(p.Name)] == "owner" {
			out = append(out, p.SelfName())
		}
	}
	return out
}

// pairing finds a paired relay by its name or its host (R4.3), case-insensitively.
func (rm *remote) pairing(ctx context.Context, name string) (*store.Pairing, error) {
	ps, err := rm.st.Pairings(ctx)
	if err != nil {
		return nil, fmt.Errorf("find pairing %s: %w", name, err)
	}
	p, e := findPairing(ps, name)
	if e != nil {
		return nil, e
	}
	return p, nil
}

// findPairing finds a paired relay in ps by its name or its host (R4.3),
// case-insensitively; nil when none matches.
func findPairing(ps []*store.Pairing, name string) (*store.Pairing, *Error) {
	for _, p := range ps {
		if strings.EqualFold(p.Name, name) {
			return p, nil
		}
	}
	var found *store.Pairing
	for _, p := range ps {
		if strings.EqualFold(p.Host, name) {
			if found != nil {
				return nil, Errorf(CodeUnknownRelay, "Host %q names more than one paired relay (%s, %s); name the relay instead. Nothing was done.", name, found.Name, p.Name)
			}
			found = p
		}
	}
	if found == nil {
		return nil, nil
	}
	return found, nil
}

// remoteCall runs an action on a paired relay for the caller; pv is what
// checkRelay read of the pairings and of this conversation's unlocked relays.
func (rm *remote) remoteCall(ctx context.Context, c *caller, a *args, p *store.Pairing, pv *peerState) (*result, *Error) {
	if e := rm.remoteAllowed(ctx, c, a, p, pv); e != nil {
		return nil, e
	}
	origin := rm.chain(c, pv)
	if promptsAgent(a) {
		if e := hopCheck(origin, p.SelfName(), rm.opts.Limits.Hops); e != nil {
			return nil, e
		}
	}
	// Cards are asked here, in the calling conversation, before the call is sent (R13.1).
	cn, e := rm.remoteCards(ctx, c, a, p)
	if e != nil {
		return nil, e
	}
	sent := false
	defer func() {
		if !sent {
			rm.cards.giveBack(ctx, cn, c)
		}
	}()
	body, out := rm.remoteBody(c, a, origin)
	// The longest wait is this relay's (R7.11); the call's timeout covers it.
	// A bad wait_seconds is refused before any card (R5.3).
	timeout, waitNote, e := rm.remoteWait(ctx, a, out)
	if e != nil {
		return nil, e
	}
	ask := &cardAsk{need: cn, action: a.action, target: targetOf(a), lines: remoteCardLines(a, p), nothing: nothingDone}
	if cn.needed() && checkable(a) && p.HasFeature("check") {
		e = rm.cardChecked(ctx, a, p, body, ask)
		cn = ask.need
		if e != nil {
			return nil, e
		}
	}
	if e := rm.cards.askCard(ctx, c, ask); e != nil {
		return nil, e
	}
	// The effect completes even if the caller goes away (R18.12).
	env, e := rm.link.peerCall(context.WithoutCancel(ctx), p, body, timeout)
	if e != nil {
		if e.Code != CodeOffline {
			return nil, e
		}
		sent = true // it may have arrived: the loop count stays
		return nil, e
	}
	if _, ok := answerOK(env); !ok {
		return nil, envError(env)
	}
	sent = true
	rm.afterRemote(ctx, c, a, p, env)
	delete(env, "ok") // the envelope's own
	res := &result{raw: env, remote: p.Name}
	if a.action == "relay_info" {
		remoteGroups(res, p)
	}
	if _, ok := res.raw["openUrl"]; ok {
		if u := remoteOpenURL(p, rawString(res.raw, "session")); u != nil {
			res.raw["openUrl"] = mustJSON(u) // R23.8: the session's page there, by the public URL its hello reports
		} // else the paired relay's own answer (an older pairing record)
	}
	if waitNote != "" {
		res.raw["note"] = mustJSON(joinNote(rawString(res.raw, "note"), waitNote))
	}
	return res, nil
}

// remoteWait is the peer call's timeout: the link's, plus the wait of an
// action that waits for a reply, capped by this relay's longest wait and
// passed on in out (R7.11), and the note on that cap.
func (rm *remote) remoteWait(ctx context.Context, a *args, out map[string]json.RawMessage) (time.Duration, string, *Error) {
	timeout := rm.opts.Timing.PeerTimeout
	if !a.spec().waits() {
		return timeout, "", nil
	}
	wait, note, e := rm.turns.waitArg(ctx, a, nothingDone)
	if e != nil {
		return 0, "", e
	}
	out["wait_seconds"] = json.RawMessage(fmt.Sprint(int(wait / time.Second)))
	return timeout + wait, note, nil
}

// remoteAllowed are the checks of a call to a paired relay made here before
// any card: what that relay serves agents here, the lock (R4.4), the
// pairing's level (R4.5), transfer's from and what its version supports
// (R13.3); the hop limit follows in remoteCall, on the call's chain.
func (rm *remote) remoteAllowed(ctx context.Context, c *caller, a *args, p *store.Pairing, pv *peerState) *Error {
	spec := a.spec()
	if spec.localOnly {
		return Errorf(CodeUnsupported, "Schedules work on this relay only; relay %q keeps none for agents here. Use relay \"this\". Nothing was done.", p.Name)
	}
	if a.asksHere() {
		return Errorf(CodeInvalidInput, "An ask on paired relay %q needs session: the session there it is about. An ask into this conversation uses relay \"this\". Nothing was asked.", p.Name)
	}
	if isExternal(c.s) && spec.wakes {
		return notWakeable(a.action, nothingDone)
	}
	// R4.4: locked until the owner mentions it here or its agent wrote here;
	// list_questions and withdraw reach the asks this conversation made there.
	if !a.ownAsks() && !pv.unlocked(p) {
		return Errorf(CodeLocked, "Relay %q is locked in this conversation. Ask the owner to mention it (for example @%s) in a message here; then it is unlocked for the rest of the conversation. Nothing was done.", p.Name, p.Name)
	}
	// R4.5: the pairing's level.
	need := neededLevel(a)
	if levelRank[p.Permission] < levelRank[need] {
		return Errorf(CodePermission, "Relay %q lets agents here %s; %s needs %q. The owner sets this per paired relay. Nothing was done.",
			p.Name, levelText(p.Permission), a.action, need)
	}
	if spec.beforeRemote != nil {
		if e := spec.beforeRemote(rm, ctx, c, a); e != nil {
			return e
		}
	}
	// R13.3: a relay too old for what the action needs says so in its hello.
	return unsupportedThere(a, p)
}

// transferFrom resolves transfer_subscriptions' from, a conversation here:
// checked here, sent as its full id.
func (rm *remote) transferFrom(ctx context.Context, c *caller, a *args) *Error {
	from, e := rm.relay.target(ctx, a, "from")
	if e != nil {
		return e
	}
	if from.ID == c.s.ID {
		return Errorf(CodeSelf, "from names this conversation itself; its subscriptions are already here. Nothing was moved.")
	}
	a.m["from"] = quoteJSON(from.ID)
	return nil
}

// remoteBody is the peer call's body: the arguments but relay, the mode the
// caller's session runs in where the agent left it out, and the origin.
func (rm *remote) remoteBody(c *caller, a *args, origin store.Origin) (PeerCallBody, map[string]json.RawMessage) {
	out := make(map[string]json.RawMessage, len(a.m))
	for k, v := range a.m {
		if k != "relay" {
			out[k] = v
		}
	}
	if mode, _ := a.str("mode"); mode == "" && c.s.Mode != "" && a.spec().prompt {
		// What the agent leaves out follows the caller's session (R7.9): a
		// send or a new session without mode runs in the caller's own (R7.10),
		// not in the other relay's stand-in's.
		out["mode"] = quoteJSON(c.s.Mode)
	}
	body := PeerCallBody{Action: a.action, Args: out, Origin: PeerOrigin{Relay: rm.opts.Name, Session: c.s.ID, Title: c.s.Title,
		Model: c.s.Model, Path: origin.Path, Unlocked: origin.Unlocked}}
	if c.turn != nil && c.turn.ReplyModel != "" {
		body.Origin.Model = c.turn.ReplyModel
	}
	return body, out
}

// cardChecked asks the other relay's checks before any card (R5.3): a call
// it would refuse is refused now, and the card names what it resolved. On an
// error ask.need is as it was: the loop count it took is given back.
func (rm *remote) cardChecked(ctx context.Context, a *args, p *store.Pairing, body PeerCallBody, ask *cardAsk) *Error {
	chk, e := rm.relay.checkThere(ctx, p, body)
	if e != nil || chk == nil {
		return e
	}
	if a.spec().updates {
		if chk.StartedByCaller {
			// That relay records this conversation as the session's starter (R7.10).
			ask.need.drop(updateFlag(p), updateReason(p))
		}
		if len(chk.Changed) == 0 {
			ask.need = &cardNeed{relay: p.Name} // a call that changes nothing asks nobody (R7.10)
		}
	}
	ask.lines = checkedCardLines(a, p, chk)
	if chk.Session != nil {
		id := LineValue(chk.Session.ID, fieldID) // it came from that relay (R18.16)
		ask.target = &id
	}
	return nil
}

// levelTexts say what each permission level lets agents here do.
var levelTexts = map[string]string{
	"none":   "do nothing but list it",
	"read":   "read only (level \"read\")",
	"prompt": "read and prompt (level \"prompt\")",
}

func levelText(level string) string {
	if t, ok := levelTexts[level]; ok {
		return t
	}
	return "do everything (level \"full\")"
}

func targetOf(a *args) *string {
	if s, _ := a.str("session"); s != "" {
		return &s
	}
	return nil
}

// remoteCards are the cards of R5.2 for an action on a paired relay.
func (rm *remote) remoteCards(ctx context.Context, c *caller, a *args, p *store.Pairing) (*cardNeed, *Error) {
	n := &cardNeed{relay: p.Name}
	spec := a.spec()
	if spec.firstCard != nil {
		flag, reason := spec.firstCard(p)
		if e := rm.firstCard(ctx, n, c, flag, reason); e != nil {
			return nil, e
		}
	}
	if spec.alwaysCard != "" {
		n.add(spec.alwaysCard)
	}
	if spec.write || a.intoSession() {
		addModeReason(n, c)
	}
	if spec.prompt {
		if e := rm.cards.loopCard(ctx, n, c); e != nil {
			return nil, e
		}
	}
	return n, nil
}

// firstCard adds the card of an action's first call from this conversation
// (its flag is not set yet), and the flag its Allow sets.
func (rm *remote) firstCard(ctx context.Context, n *cardNeed, c *caller, flag, reason string) *Error {
	ok, err := rm.st.Flag(ctx, c.s.ID, flag)
	if err != nil {
		return internal("remoteCards: Flag", err)
	}
	if !ok {
		n.add(reason)
		n.flags = append(n.flags, flag)
	}
	return nil
}

// updateFlag and updateReason are the card of update_session on a paired
// relay's session this conversation did not start: once per conversation
// and relay (R5.2.4).
func updateFlag(p *store.Pairing) string { return "update:" + strings.ToLower(p.Name) }

func updateReason(p *store.Pairing) string {
	return fmt.Sprintf("This conversation changes settings of sessions on relay %q for the first time.", p.Name)
}

func remoteCardLines(a *args, p *store.Pairing) []string {
	// R18.16: the agent's arguments go into the lines made safe for a line.
	line := fmt.Sprintf(`%s on relay "%s"`, a.action, LineValue(p.Name, fieldRelay))
	if s, _ := a.str("session"); s != "" {
		line += fmt.Sprintf(", session %s", LineValue(s, fieldID))
	}
	for _, k := range []string{"text", "question"} {
		if t, _ := a.str(k); t != "" {
			line += ": " + LineValue(t, fieldExcerpt)
			break
		}
	}
	lines := []string{line}
	var set []string
	for _, k := range []string{"model", "effort", "mode", "group", "title", "cwd"} {
		if v, _ := a.str(k); v != "" {
			set = append(set, fmt.Sprintf("%s: %s", strings.ToUpper(k[:1])+k[1:], LineValue(v, fieldOf(k))))
		}
	}
	if len(set) > 0 {
		lines = append(lines, strings.Join(set, " · "))
	}
	return lines
}

// afterRemote keeps what this relay must follow of a successful remote call:
// a subscription there is polled from here (R8.20), an ask there too (R10.5).
func (rm *remote) afterRemote(ctx context.Context, c *caller, a *args, p *store.Pairing, env peerAnswer) {
	ctx = context.WithoutCancel(ctx)
	switch a.action {
	case "subscribe":
		rm.keepMirror(ctx, c, a, p, env)
	case "list_subscriptions":
		rm.heldHere(ctx, p, env) // what this relay holds for them (R8.23)
	case "unsubscribe":
		subs, err := rm.st.RemoteSubscriptions(ctx)
		if err != nil {
			rm.log.Warn("remote subscriptions unreadable", "err", err)
			return
		}
		ref, _ := a.str("subscription_id")
		for _, s := range subs {
			if s.Watcher == c.s.ID && strings.EqualFold(s.Relay, p.Name) && (ref == "all" || strings.HasPrefix(s.ID, ref)) {
				rm.endMirror(ctx, s, "unsubscribed")
			}
		}
	case "transfer_subscriptions":
		rm.moveMirrors(ctx, c, a, p, env)
	case "ask":
		id := rawString(env, "question_id")
		if !peerRecordID(id, "ask_") {
			if id != "" {
				rm.log.Warn("paired relay answered an ask id this relay does not keep", "relay", p.Name)
			}
			return
		}
		sid, _ := a.str("session")
		q, _ := a.str("question")
		ra := &store.RemoteAsk{ID: id, Relay: p.Name, Asker: c.s.ID, Session: sid, Question: q, CreatedAt: rm.now(),
			NextPollAt: rm.now().Add(rm.opts.Timing.AskPoll)}
		if err := rm.st.SaveRemoteAsk(ctx, ra); err != nil {
			rm.log.Error("keep remote ask", "relay", p.Name, "ask", id, "err", err)
		}
		rm.relay.notify(ctx, "inbox") // the owner's console lists paired relays' asks too (R19.4)
		// R23.10: the ask waits for this relay's owner; the asker's page is here.
		rm.relay.ownerNotice(ctx, relay.NoticeAsk, c.s.ID, c.s.Title, q)
	}
}

func (rm *remote) endMirror(ctx context.Context, s *store.Subscription, reason string) {
	// Ended meanwhile (an unpairing, the owner's Unsubscribe, the poller
	// seeing it end there): the first reason stays, on the record as stored.
	if _, err := rm.st.EndSubscription(ctx, s, reason, rm.now()); err != nil {
		rm.log.Warn("end remote subscription", "sub", s.ID, "err", err)
	}
}

// startedBy is the startedBy record of a session the caller starts (R4.11):
// for another relay's agent, that relay and its session.
func (rm *remote) startedBy(c *caller) *store.Ref {
	if c.remote != nil {
		return &store.Ref{Relay: c.remote.Relay, Session: c.remote.Session, Title: c.remote.Title}
	}
	return &store.Ref{Relay: rm.opts.Name, Session: c.s.ID, Title: c.s.Title}
}

// moveMirrors follows a transfer on a paired relay: the moved subscriptions
// are polled for the caller now, the old mirrors end as transferred.
func (rm *remote) moveMirrors(ctx context.Context, c *caller, a *args, p *store.Pairing, env peerAnswer) {
	from, _ := a.str("from")
	subs, err := rm.st.RemoteSubscriptions(ctx)
	if err != nil {
		rm.log.Warn("remote subscriptions unreadable", "err", err)
		return
	}
	old := map[string]*store.Subscription{}
	for _, s := range subs {
		if s.Watcher == from && strings.EqualFold(s.Relay, p.Name) {
			old[s.ID] = s
		}
	}
	for _, x := range looseList(env["subscriptions"]) {
		var v answeredSubscription
		decodeLoose(x, &v)
		id := v.ID
		o := old[v.MovedFrom]
		if id == "" || o == nil || !rm.mirrorFree(ctx, p, id, o.ID) {
			continue
		}
		nu := *o
		nu.ID, nu.Watcher, nu.Cursor, nu.LinkDownAt, nu.CreatedAt, nu.LastDigestAt = id, c.s.ID, "0", time.Time{}, rm.now(), time.Time{}
		if err := rm.st.SaveSubscription(ctx, &nu); err != nil {
			rm.log.Error("keep moved remote subscription", "relay", p.Name, "sub", id, "err", err)
		}
	}
	for _, o := range old {
		rm.endMirror(ctx, o, "transferred")
	}
}

// neededFeature is the hello feature an action on a paired relay needs (R13.3).
func neededFeature(a *args) string {
	spec := a.spec()
	if spec.extra.arg != "" && a.has(spec.extra.arg) {
		return spec.extra.feature
	}
	return firstNonEmpty(spec.feature, "call")
}

// featureRefusals are the refusals of an argument's feature a paired relay
// does not serve, with its name, version and the feature (R13.3).
var featureRefusals = map[string]string{
	"groups":         "The target relay doesn't support groups on create_session yet: relay %q runs a version (%s) that does not serve %q; it needs an update. Leave out group to start the session there without one. " + nothingCreated,
	"billing_switch": "Relay %q runs a version (%s) that does not serve %q, which send with provider (the billing switch) needs; it needs an update. Send without provider to keep the session's billing. " + nothingSent,
}

// unsupportedThere refuses an action a paired relay's hello says it cannot
// serve (R13.3), before anything is sent.
func unsupportedThere(a *args, p *store.Pairing) *Error {
	f := neededFeature(a)
	if p.HasFeature(f) {
		return nil
	}
	version := firstNonEmpty(p.Version, "unknown")
	if msg, ok := featureRefusals[f]; ok {
		return Errorf(CodeUnsupported, msg, p.Name, version, f)
	}
	nothing := nothingDone
	if a.spec().updates {
		nothing = nothingChanged
	}
	return Errorf(CodeUnsupported, "Relay %q runs a version (%s) that does not serve %q, which %s needs; it needs an update. %s",
		p.Name, version, f, a.action, nothing)
}

// remoteGroups marks relay_info of a paired relay too old to list its
// groups (R7.2): groups null, and groupsNote says why and that
// create_session cannot take group there.
func remoteGroups(res *result, p *store.Pairing) {
	if _, ok := res.raw["groups"]; ok && p.HasFeature("groups") {
		return // listed, or null with that relay's own note
	}
	delete(res.raw, "groupsTotal")
	res.raw["groups"] = json.RawMessage("null")
	res.raw["groupsNote"] = mustJSON(fmt.Sprintf("Relay %q runs a version (%s) that does not list its session groups, so create_session cannot take group there; it needs an update.",
		p.Name, firstNonEmpty(p.Version, "unknown")))
}
