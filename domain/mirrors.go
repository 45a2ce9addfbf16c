package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// Mirrors: the record this relay keeps of a subscription one of its
// conversations holds on a paired relay (R8.20). The subscription lives
// there; here it is polled, its digest and quiet hours are applied (R8.21),
// and it is the owner's like any other: it shows in the watcher's
// subscriptions, the owner's Unsubscribe ends it on both relays, and what
// this relay holds of it is its heldCount (R8.23).

// keepMirror records a subscription just made on paired relay p: what the
// relay answered (sessions with their titles, the options it took, exclude
// as full ids), the arguments as sent where an older relay says less.
func (rm *remote) keepMirror(ctx context.Context, c *caller, a *args, p *store.Pairing, env peerAnswer) {
	var sm answeredSubscription
	decodeLoose(env["subscription"], &sm)
	id := sm.ID
	if !rm.mirrorFree(ctx, p, id, "") {
		return
	}
	sub := &store.Subscription{ID: id, Watcher: c.s.ID, Relay: p.Name, Cursor: "0", CreatedAt: rm.now()}
	refs := mirrorArgs(sub, a)
	mirrorAnswered(sub, &sm, refs)
	if err := rm.st.SaveSubscription(ctx, sub); err != nil {
		rm.log.Error("keep remote subscription", "relay", p.Name, "sub", id, "err", err)
	}
}

// mirrorArgs fills a mirror with the subscribe arguments as sent; it
// returns the sessions the agent named.
func mirrorArgs(sub *store.Subscription, a *args) []string {
	sub.Events, _ = a.strs("events")
	sub.Exclude, _ = a.strs("exclude")
	sub.Match, _ = a.str("match")
	sub.DigestMinutes, _, _ = a.integer("digest_minutes")
	if raw, ok := a.m["quiet_hours"]; ok {
		var q store.Quiet
		if json.Unmarshal(raw, &q) == nil && (q.From != "" || q.To != "") {
			sub.Quiet = &q
		}
	}
	refs, _ := a.strs("sessions")
	if len(refs) == 1 && strings.EqualFold(refs[0], "all") {
		sub.All = true
	}
	return refs
}

// mirrorAnswered fills a mirror with what the paired relay answered of it.
func mirrorAnswered(sub *store.Subscription, sm *answeredSubscription, refs []string) {
	// What the relay answered names the sessions (it resolved the ids), but
	// never more than the agent asked for: its events are filtered here by
	// what the subscription itself names (R18.33).
	if !sub.All {
		for _, m := range sm.sessionRefs() {
			sid, title := m.ID, m.Title
			if sid != "" && slices.ContainsFunc(refs, func(ref string) bool { return sessionRefMatches(ref, sid) }) {
				sub.Sessions = append(sub.Sessions, sid)
				sub.Titles = append(sub.Titles, title)
			}
		}
	}
	if !sub.All && len(sub.Sessions) == 0 {
		sub.Sessions = refs // as the agent gave them (an older relay names none)
	}
	if len(sub.Events) == 0 {
		sub.Events = slices.Clone(defaultEvents) // R8.2, whatever the relay answered
	}
	if ex := looseStrings(sm.Exclude); len(ex) > 0 {
		sub.Exclude = ex // full ids: the relay resolved them
	}
	sub.Once = sm.Once
	if sm.StalledMinutes != nil {
		sub.StalledMinutes = int(*sm.StalledMinutes)
	}
	if sm.HeartbeatMinutes != nil {
		sub.HeartbeatMinutes = int(*sm.HeartbeatMinutes)
	}
}

// peerRecordID reports whether id, a record's id a paired relay answered,
// is one this relay keeps: prefix and at most 64 letters, digits, '_' or
// '-' (R3.7, R18.34).
func peerRecordID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// mirrorFree reports whether a subscription id paired relay p answered may
// name a new mirror here (R18.34): an id of the form this relay keeps that
// names no record here (but the mirror it replaces, moved), so that no
// answer of a paired relay overwrites a local subscription or another
// mirror. One that may not is logged and not followed.
func (rm *remote) mirrorFree(ctx context.Context, p *store.Pairing, id, moved string) bool {
	if id == "" {
		return false
	}
	if peerRecordID(id, "sub_") {
		_, err := rm.st.GetSubscription(ctx, id)
		if errors.Is(err, store.ErrNotFound) || (err == nil && id == moved) {
			return true
		}
		if err != nil {
			rm.log.Error("keep remote subscription", "relay", p.Name, "sub", id, "err", err)
			return false
		}
	}
	rm.log.Warn("paired relay answered a subscription id that names a record here, or none this relay keeps: not followed", "relay", p.Name)
	return false
}

// sessionRefMatches reports whether a session reference as an agent gave
// it names session id: the id, or a prefix of 8 or more characters (R3.7).
func sessionRefMatches(ref, id string) bool {
	ref = normRef(ref)
	return ref == strings.ToLower(id) || (len(ref) >= 8 && strings.HasPrefix(strings.ToLower(id), ref))
}

// mirrorExcludes reports whether a mirror leaves out a session's events
// (R8.21: this relay drops them too, for a relay too old to know exclude;
// such a relay did not resolve the ids, so an id's prefix as the agent gave
// it counts, R3.7).
func mirrorExcludes(sub *store.Subscription, sid string) bool {
	if sid == "" {
		return false
	}
	return slices.ContainsFunc(sub.Exclude, func(x string) bool {
		return x == sid || (len(x) >= 8 && strings.HasPrefix(sid, x))
	})
}

// heldHere puts into a paired relay's list_subscriptions answer what this
// relay holds for its subscriptions (R8.23): their digest and quiet hours
// apply here, so the relay itself never holds any (R8.21).
func (rm *remote) heldHere(ctx context.Context, p *store.Pairing, env peerAnswer) {
	list := looseList(env["subscriptions"])
	changed := false
	for i, x := range list {
		var m map[string]json.RawMessage
		decodeLoose(x, &m)
		id := rawString(m, "id")
		if id == "" {
			continue
		}
		sub, err := rm.st.GetSubscription(ctx, id)
		if err != nil || !strings.EqualFold(sub.Relay, p.Name) {
			continue
		}
		n, due, err := rm.st.HeldInfo(ctx, id)
		if err != nil {
			rm.log.Warn("held events unreadable", "sub", id, "err", err)
			continue
		}
		_, ended := m["endReason"]
		switch {
		case n > 0:
			m["heldCount"], m["nextDeliveryAt"] = mustJSON(n), mustJSON(ts(due))
		case ended:
			delete(m, "heldCount")
			delete(m, "nextDeliveryAt")
		default:
			m["heldCount"], m["nextDeliveryAt"] = mustJSON(0), mustJSON(nil)
		}
		list[i], changed = mustJSON(m), true
	}
	if changed {
		env["subscriptions"] = mustJSON(list)
	}
}

// watchingList is the owner's view of a conversation's subscriptions
// (GET /sessions/{id} watching, the console's chip): those on this relay
// and those it holds on paired relays, each of those naming its relay.
func (rm *remote) watchingList(ctx context.Context, watcher string) ([]*relay.SubscriptionItem, error) {
	list, err := rm.subs.SubscriptionList(ctx, watcher)
	if err != nil {
		return nil, err
	}
	active, err := rm.st.WatcherMirrors(ctx, watcher)
	if err != nil {
		return nil, err
	}
	ended, err := rm.st.EndedMirrors(ctx, watcher, rm.now().Add(-endedListWindow))
	if err != nil {
		return nil, err
	}
	for _, sub := range append(active, ended...) {
		m, err := rm.subs.subListItem(ctx, sub)
		if err != nil {
			return nil, err
		}
		list = append(list, m)
	}
	return list, nil
}

// unsubscribeMirror is the owner's Unsubscribe of a subscription held on a
// paired relay: it ends there (told now) and here.
func (rm *remote) unsubscribeMirror(ctx context.Context, sub *store.Subscription) (*relay.Ended, error) {
	out := &relay.Ended{ID: sub.ID, Relay: sub.Relay}
	if sub.EndReason != "" {
		out.EndReason = sub.EndReason
		return out, nil
	}
	told := false
	p, err := rm.st.GetPairing(ctx, sub.Relay)
	switch {
	case err == nil:
		told = rm.remoteUnsubscribe(ctx, p, sub)
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	rm.endMirror(ctx, sub, "unsubscribed")
	out.EndReason = sub.EndReason
	if !told {
		out.Note = fmt.Sprintf("Relay %q could not be told; it stops keeping this subscription's events within %s of the last one.",
			sub.Relay, rm.opts.Timing.ReplayKeep.Round(time.Hour))
	}
	return out, nil
}

// remoteUnsubscribe ends a mirror's subscription on its relay (best effort,
// short); it reports whether the relay answered.
func (rm *remote) remoteUnsubscribe(ctx context.Context, p *store.Pairing, s *store.Subscription) bool {
	return rm.tellPeer(ctx, p, actUnsubscribe, "subscription_id", s.ID, s.Watcher)
}

// remoteWithdraw ends an ask this relay follows on the relay that keeps it
// (R10.8: unpairing ends it there); it reports whether the relay answered.
func (rm *remote) remoteWithdraw(ctx context.Context, p *store.Pairing, a *store.RemoteAsk) bool {
	return rm.tellPeer(ctx, p, "withdraw", "question_id", a.ID, a.Asker)
}

// tellPeer makes a short best-effort peer call of action on the record id
// (passed as the argument idArg) for this relay's conversation session; it
// reports whether the relay answered.
func (rm *remote) tellPeer(ctx context.Context, p *store.Pairing, action, idArg, id, session string) bool {
	body := PeerCallBody{Action: action, Args: map[string]json.RawMessage{idArg: quoteJSON(id)},
		Origin: PeerOrigin{Relay: rm.opts.Name, Session: session, Path: []string{rm.opts.Name}}}
	if _, e := rm.link.peerCall(context.WithoutCancel(ctx), p, body, 3*time.Second); e != nil {
		rm.log.Info(action+" on paired relay failed", "relay", p.Name, "id", id, "err", e.Msg)
		return false
	}
	return true
}
