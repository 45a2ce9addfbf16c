package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/oar/relay/peer"
	"github.com/oar/relay/scheduler"
	"github.com/oar/relay/store"
)

// The check before a card (R5.3, R7.9, R7.13, R13.1): a call to a paired
// relay that needs the owner's approval is first checked there, by
// POST /peer/v1/check, with the same body as the call. The other relay runs
// the action's checks (the accept setting, the hop limit, target, model with
// its did-you-mean, effort, group, folder, billing partner, subscribe's
// options, an ask's or answer's arguments, a transfer's limit, the limits) and nothing else: it changes nothing and counts
// nothing. A refusal comes back as the call's would, and the caller's relay
// gives it to its agent without a card; a pass names what the other relay
// resolved, so the card can say it (`Group: Release 2.4 (grp_…)`,
// `Switches billing to NAME`, digest and quiet hours), and whether that
// relay records this conversation as the starter of the session an
// update_session changes (then no card asks, R5.2.4). A relay whose hello
// lacks "check" is not asked: its cards come before its checks, as before.

// The check's answer, the package peer's wire types.
type (
	// PeerChecked is what POST /peer/v1/check answers in `check`.
	PeerChecked = peer.Checked
	// CheckedRef is a session or group the check resolved.
	CheckedRef = peer.CheckedRef
	// CheckedValue is one setting update_session would change.
	CheckedValue = peer.CheckedValue
)

// PeerCheck answers POST /peer/v1/check: the checks of a call a paired
// relay's agent wants to make, and what they resolved, without the effect.
// The answer is the result envelope: ok with `check`, or the error the call
// would have got.
func (r *Relay) PeerCheck(ctx context.Context, tok string, raw []byte) json.RawMessage {
	env := map[string]json.RawMessage{}
	action, c, a, e := r.peerCaller(ctx, tok, raw)
	var chk *PeerChecked
	if e == nil {
		_, e = r.peerCheck(ctx, c, a)
	}
	if e == nil {
		chk, e = r.checkAction(ctx, c, a)
	}
	if e != nil {
		if e.Code == CodeInternal {
			r.log.Error("peer check failed", "action", action, "err", e.cause)
		}
		errorEnvelope(env, e)
		if c != nil {
			r.log.Info("peer check refused", "action", action, "from", c.remote.Relay, "code", e.Code)
		}
	} else {
		env["ok"], env["check"] = json.RawMessage("true"), mustJSON(chk)
	}
	b, err := json.Marshal(env)
	if err != nil {
		r.log.Error("encode check", "err", err)
		return json.RawMessage(`{"ok":false,"code":"REMOTE_RELAY_INTERNAL","error":"The check could not be encoded. Nothing was done."}`)
	}
	return b
}

// checkAction runs an action's checks for a paired relay's agent and
// names what they resolved; nothing is written. An action the registry
// gives no check passes with its name alone.
func (r *Relay) checkAction(ctx context.Context, c *caller, a *args) (*PeerChecked, *Error) {
	chk := &PeerChecked{Action: a.action}
	if check := a.spec().check; check != nil {
		if e := check(r, ctx, c, a, chk); e != nil {
			return nil, e
		}
	}
	return chk, nil
}

// The actions' checks for a paired relay's agent (actionSpec.check).

func checkedSend(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error {
	in, pl, e := r.sends.sendChecks(ctx, c, a)
	if e != nil {
		return e
	}
	chk.Session = &CheckedRef{ID: pl.s.ID, Title: pl.s.Title}
	chk.Provider, chk.Model, chk.Effort, chk.Mode = pl.info.Name, firstNonEmpty(in.model, pl.s.Model), firstNonEmpty(in.effort, pl.s.Effort), pl.mode
	if pl.switchTo != "" {
		chk.Billing = r.sends.billingTo(pl.info) // the card's words (R24.6)
	}
	return nil
}

func checkedCreate(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error {
	in, pl, e := r.creates.createChecks(ctx, c, a)
	if e != nil {
		return e
	}
	chk.Title, chk.Provider, chk.Model, chk.Effort, chk.Mode, chk.Cwd = pl.title, pl.info.Name, pl.model, pl.effort, pl.mode, pl.cwd
	if pl.repo != nil { // a repository session (R24.4): where it will work
		chk.Cwd = repoWhere(in.repo, pl.branch)
	}
	if pl.group != nil {
		chk.Group = &CheckedRef{ID: pl.group.ID, Name: r.groups.groupName(ctx, pl.group)}
	}
	return nil
}

func checkedUpdate(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error {
	_, pl, ch, e := r.updates.updateChecks(ctx, c, a)
	if e != nil {
		return e
	}
	s := pl.s
	chk.Session = &CheckedRef{ID: s.ID, Title: s.Title}
	chk.StartedByCaller = s.StartedBy != nil && strings.EqualFold(s.StartedBy.Relay, c.remote.Relay) && s.StartedBy.Session == c.remote.Session
	chk.Changed = nonNil(ch.names)
	chk.Changes = r.checkedChanges(ctx, pl, ch)
	return nil
}

func checkedSubscribe(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error {
	in, pl, e := r.subs.subscribeChecks(ctx, c, a)
	if e != nil {
		return e
	}
	for _, s := range pl.watched {
		chk.Watched = append(chk.Watched, CheckedRef{ID: s.ID, Title: s.Title})
	}
	chk.All, chk.Events, chk.DigestMinutes, chk.QuietHours, chk.Excluded = in.all, in.events, in.digest, in.quiet, len(pl.exclude)
	return nil
}

func checkedAsk(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error {
	in, e := r.asks.checkAsk(ctx, c, a)
	if e != nil {
		return e
	}
	chk.Session = &CheckedRef{ID: in.concern.ID, Title: in.concern.Title}
	return nil
}

func checkedAnswer(r *Relay, ctx context.Context, c *caller, a *args, chk *PeerChecked) *Error {
	_, s, _, e := r.steer.checkAnswer(ctx, c, a)
	if e != nil {
		return e
	}
	chk.Session = &CheckedRef{ID: s.ID, Title: s.Title}
	return nil
}

func checkedTransfer(r *Relay, ctx context.Context, c *caller, a *args, _ *PeerChecked) *Error {
	_, _, e := r.subs.checkTransfer(ctx, c, a)
	return e
}

// checkedTarget checks an action whose one check is its target session (stop, archive).
func checkedTarget(r *Relay, ctx context.Context, _ *caller, a *args, chk *PeerChecked) *Error {
	s, e := r.target(ctx, a, "session")
	if e != nil {
		return e
	}
	chk.Session = &CheckedRef{ID: s.ID, Title: s.Title}
	return nil
}

// checkedChanges are the settings an update_session would change, as the
// card on the calling relay shows them (label and value, a group's id).
func (r *Relay) checkedChanges(ctx context.Context, pl *updatePlan, ch *updateChange) []CheckedValue {
	var out []CheckedValue
	for _, name := range ch.names {
		v := CheckedValue{Setting: name}
		switch name {
		case "auto_compact_window":
			v.Label, v.Value = "Auto-compact window", fmt.Sprint(pl.acw)
		case "group":
			v.Label = "Group"
			switch {
			case pl.leave:
				v.Value = "none"
			case pl.group != nil:
				v.Value, v.ID = r.groups.groupName(ctx, pl.group), pl.group.ID
			default:
				v.Value, v.ID = pl.createGroup, "new"
			}
		default:
			for _, t := range ch.texts {
				if t.name == name {
					v.Label, v.Value = t.label, t.value
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// checkable are the actions a card may guard on a paired relay: they are
// checked there before the card (R5.3).
func checkable(a *args) bool {
	return a.spec().check != nil && (!a.spec().intoSession || a.intoSession())
}

// checkThere asks a paired relay to check a call before its card (R5.3):
// nil, nil when that relay does not serve the check (an older relay: the
// card comes first, as before); the other relay's refusal as the call's.
func (r *Relay) checkThere(ctx context.Context, p *store.Pairing, body PeerCallBody) (*PeerChecked, *Error) {
	env, err := r.link.peers.Check(ctx, peerTarget(p), body, r.opts.Timing.PeerTimeout)
	e := r.link.peerDone("check", err)
	r.link.link(ctx, p, e)
	if e != nil {
		if notServed(e, "/peer/v1/check") {
			return nil, nil // a relay from before the check, whose pairing knows no features
		}
		return nil, e
	}
	var ok bool
	if json.Unmarshal(env["ok"], &ok) != nil {
		return nil, Errorf(CodeOffline, "Relay %q answered the check without a result envelope. Nothing was done.", p.Name)
	}
	if !ok {
		return nil, envError(env)
	}
	var chk PeerChecked
	if err := json.Unmarshal(env["check"], &chk); err != nil {
		return nil, Errorf(CodeOffline, "Relay %q answered the check with JSON this relay cannot read (%v). Nothing was done.", p.Name, err)
	}
	return &chk, nil
}

// notServed reports a 404 for path: as text (CodeUnsupported from the peer client),
// or as the JSON this relay's own router answers for a route it does not
// know, which an older relay of this project answers.
func notServed(e *Error, path string) bool {
	return (e.Code == CodeUnsupported || e.Code == CodeNotFound) && strings.Contains(e.Msg, path)
}

// envError is the error of a paired relay's failed envelope, its fields kept.
func envError(env peerAnswer) *Error {
	code, msg := rawString(env, "code"), rawString(env, "error")
	if code == "" {
		code = CodeInternal
	}
	er := &Error{Code: code, Msg: msg}
	for k, v := range env {
		var x any
		switch {
		case k == "ok" || k == "code" || k == "error":
		case json.Unmarshal(v, &x) == nil:
			er = er.With(k, x)
		}
	}
	return closedPeerError(er) // its code is data, never a label (R18.32)
}

// checkedCardLines are the card's lines of a call a paired relay checked:
// what it resolved, in the words of this relay's own cards (§5, R7.8, R7.9,
// R5.4). Every value came from that relay or the agent and goes through
// LineValue (R18.16).
func checkedCardLines(a *args, p *store.Pairing, k *PeerChecked) []string {
	if lines := a.spec().checkedLines; lines != nil {
		if out := lines(a, LineValue(p.Name, fieldRelay), k); out != nil {
			return out
		}
	}
	return remoteCardLines(a, p)
}

// The actions' card lines from a check (actionSpec.checkedLines): relay is
// the paired relay's name made safe for a line; nil when the check named
// too little.

func sendCheckedLines(a *args, relay string, k *PeerChecked) []string {
	if k.Session == nil {
		return nil
	}
	text, _ := a.str("text")
	lines := []string{fmt.Sprintf(`Send to "%s" (%s) on relay "%s": %s`, LineValue(k.Session.Title, fieldTitle), lineID(k.Session.ID), relay, LineValue(text, fieldExcerpt)),
		settingsLine(k.Model, k.Effort, k.Mode)}
	if k.Billing != "" {
		lines = append(lines, "Switches billing to "+LineValue(k.Billing, fieldModel))
	}
	return lines
}

func createCheckedLines(a *args, relay string, k *PeerChecked) []string {
	text, _ := a.str("text")
	lines := []string{fmt.Sprintf(`Start a session "%s" with %s in %s on relay "%s": %s`, LineValue(k.Title, fieldTitle), LineValue(k.Provider, fieldModel),
		LineValue(k.Cwd, fieldPath), relay, LineValue(text, fieldExcerpt)), settingsLine(k.Model, k.Effort, k.Mode)}
	if k.Group != nil {
		lines = append(lines, groupLine(k.Group.Name, k.Group.ID))
	}
	return lines
}

func updateCheckedLines(_ *args, relay string, k *PeerChecked) []string {
	if k.Session == nil {
		return nil
	}
	var changes []string
	for _, v := range k.Changes {
		label := LineValue(v.Label, fieldWord)
		if v.ID != "" {
			changes = append(changes, strings.Replace(groupLine(v.Value, v.ID), "Group", label, 1))
			continue
		}
		changes = append(changes, changeLine(label, v.Value, fieldOf(v.Setting)))
	}
	return []string{fmt.Sprintf(`Change "%s" (%s) on relay "%s":`, LineValue(k.Session.Title, fieldTitle), lineID(k.Session.ID), relay), strings.Join(changes, " · ")}
}

func subscribeCheckedLines(_ *args, relay string, k *PeerChecked) []string {
	watched := make([]*store.Session, len(k.Watched))
	for i, w := range k.Watched {
		watched[i] = &store.Session{ID: w.ID, Title: w.Title}
	}
	lines := []string{subscribeCardLine(watched, k.All, k.Events, ` on relay "`+relay+`"`)}
	var q *scheduler.Quiet
	if k.QuietHours != nil {
		q, _ = scheduler.ParseQuiet(k.QuietHours.From, k.QuietHours.To, k.QuietHours.TZ) // checked again: it came from that relay
	}
	if opts := subOptions(k.DigestMinutes, q, k.Excluded); opts != "" {
		lines = append(lines, opts)
	}
	return lines
}
