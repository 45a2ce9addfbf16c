package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/scheduler"
	"github.com/oar/relay/store"
)

const nothingSubscribed = "No subscription was made."

// subscriptions is the subscriptions subsystem (R8.4, R8.19, R8.23, R8.24):
// the subscribe, unsubscribe, list_subscriptions and transfer_subscriptions
// actions, their checks (also those a paired relay asks, R5.3), the views
// of a subscription, the owner's unsubscribe, and ending subscriptions (one
// by one, or what archiving a session ends). It sees the store only as
// recordStore and subscriptionStore, schedules heartbeats and releases
// through the delivery pipeline, asks its cards through the cards, and
// reaches the rest of the relay only through subscriptionsHost.
type subscriptions struct {
	st       subscriptionsStore
	now      func() time.Time
	opts     *Options // the relay's: limits, timing
	pipeline *pipeline
	cards    *cards
	relay    subscriptionsHost
}

// subscriptionsStore is the store as the subscriptions see it.
type subscriptionsStore interface {
	recordStore
	subscriptionStore
}

// subscriptionsHost is what the subscriptions ask of the rest of the relay:
// a session by reference or by argument (sessions.go), the owner's
// unsubscribe of a subscription held on a paired relay (mirrors.go) and
// telling the console (notify.go).
type subscriptionsHost interface {
	sessionByRef(ctx context.Context, ref string) (*store.Session, *Error)
	targets
	unsubscribeMirror(ctx context.Context, sub *store.Subscription) (*relay.Ended, error)
	notifySub(ctx context.Context, sub *store.Subscription)
}

// subscribe makes a subscription: the calling conversation watches sessions
// for events (R8.4). Its checks run in R3.4a's order: shapes, targets, self,
// the limit, card; only then the effect.
func (sb *subscriptions) subscribe(ctx context.Context, c *caller, a *args) (*result, *Error) {
	in, pl, e := sb.subscribeChecks(ctx, c, a)
	if e != nil {
		return nil, e
	}
	if e := sb.cardSubscribe(ctx, c, in, pl); e != nil {
		return nil, e
	}
	return sb.applySubscribe(ctx, c, in, pl)
}

// subscribeChecks are all of subscribe's checks before its card: the
// caller can be woken, the arguments' shapes, then its rules (also the check
// a paired relay asks, R5.3).
func (sb *subscriptions) subscribeChecks(ctx context.Context, c *caller, a *args) (*subscribeArgs, *subscribePlan, *Error) {
	if isExternal(c.s) {
		return nil, nil, notWakeable(a.action, nothingSubscribed)
	}
	in, e := sb.parseSubscribeArgs(a)
	if e != nil {
		return nil, nil, e
	}
	pl, e := sb.checkSubscribe(ctx, c, in)
	if e != nil {
		return nil, nil, e
	}
	return in, pl, nil
}

// subscribeArgs are subscribe's arguments, their shapes checked.
type subscribeArgs struct {
	refs        []string // the sessions to watch; empty when all
	all         bool
	excludeRefs []string
	events      []string // the default when none are named
	once        bool
	match       string
	stalled     int // minutes
	heartbeat   int // minutes, 0 for none
	digest      int // minutes, 0 for none
	quiet       *store.Quiet
	q           *scheduler.Quiet // quiet, parsed
}

// subscribePlan is what subscribe's checks found.
type subscribePlan struct {
	watched []*store.Session // none when all
	exclude []string         // session ids
}

// badSubscribe is subscribe's INVALID_INPUT error.
func badSubscribe(format string, v ...any) *Error {
	return Errorf(CodeInvalidInput, format+" "+nothingSubscribed, v...)
}

// parseSubscribeArgs reads subscribe's arguments: shapes first (R3.4a).
func (sb *subscriptions) parseSubscribeArgs(a *args) (*subscribeArgs, *Error) {
	in := &subscribeArgs{}
	refs, e := a.strs("sessions")
	if e != nil {
		return nil, badSubscribe("sessions must be a list of session ids, or [\"all\"].")
	}
	if len(refs) == 0 {
		return nil, badSubscribe(`sessions is required: the ids of the sessions to watch, or ["all"].`)
	}
	if e := parseSubEvents(a, in); e != nil {
		return nil, e
	}
	if v, ok := a.m["once"]; ok {
		if json.Unmarshal(v, &in.once) != nil {
			return nil, badSubscribe("once must be true or false.")
		}
	}
	if e := parseSubMatch(a, in); e != nil {
		return nil, e
	}
	if e := parseSubMinutes(a, in, int(sb.opts.Timing.StalledDefault/time.Minute)); e != nil {
		return nil, e
	}
	if in.heartbeat > 0 && !slices.Contains(in.events, EvHeartbeat) {
		in.events = append(slices.Clone(in.events), EvHeartbeat) // heartbeat_minutes asks for heartbeats
	}
	if e := parseQuietHours(a, in); e != nil {
		return nil, e
	}
	if e := parseSubTargets(a, in, refs); e != nil {
		return nil, e
	}
	return in, nil
}

// parseSubEvents reads events: known kinds, the default when none.
func parseSubEvents(a *args, in *subscribeArgs) *Error {
	var e *Error
	if in.events, e = a.strs("events"); e != nil {
		return badSubscribe("events must be a list of event kinds.")
	}
	for _, ev := range in.events {
		if !slices.Contains(eventKinds, ev) {
			return badSubscribe("Unknown event kind %q; kinds: %s.", ev, strings.Join(eventKinds, ", "))
		}
	}
	if len(in.events) == 0 {
		in.events = defaultEvents
	}
	return nil
}

// parseSubMatch reads match: a regular expression of at most 500 characters.
func parseSubMatch(a *args, in *subscribeArgs) *Error {
	var e *Error
	if in.match, e = a.str("match"); e != nil {
		return badSubscribe("match must be a string (a regular expression).")
	}
	if e := maxChars("match", in.match, 500, nothingSubscribed); e != nil {
		return e
	}
	if in.match != "" {
		if _, err := regexp.Compile("(?i)" + in.match); err != nil {
			return badSubscribe("match is not a valid regular expression: %v.", err)
		}
	}
	return nil
}

// parseQuietHours reads quiet_hours {from, to, tz}.
func parseQuietHours(a *args, in *subscribeArgs) *Error {
	v, ok := a.m["quiet_hours"]
	if !ok {
		return nil
	}
	var qh struct {
		From string `json:"from"`
		To   string `json:"to"`
		TZ   string `json:"tz"`
	}
	if err := json.Unmarshal(v, &qh); err != nil {
		return badSubscribe(`quiet_hours must be an object {"from": "HH:MM", "to": "HH:MM", "tz": "Area/City"}.`)
	}
	parsed, err := scheduler.ParseQuiet(qh.From, qh.To, qh.TZ)
	if err != nil {
		return badSubscribe("%s.", err.Error())
	}
	if parsed != nil {
		in.q = parsed
		in.quiet = &store.Quiet{From: qh.From, To: qh.To, TZ: qh.TZ}
	}
	return nil
}

// parseSubTargets reads what is watched: ["all"] with exclude, or a list
// of sessions.
func parseSubTargets(a *args, in *subscribeArgs, refs []string) *Error {
	var e *Error
	if in.excludeRefs, e = a.strs("exclude"); e != nil {
		return badSubscribe("exclude must be a list of session ids.")
	}
	in.all = len(refs) == 1 && strings.EqualFold(refs[0], "all")
	if !in.all && slices.ContainsFunc(refs, func(s string) bool { return strings.EqualFold(s, "all") }) {
		return badSubscribe(`sessions takes either ["all"] or a list of session ids, not both.`)
	}
	if len(in.excludeRefs) > 0 && !in.all {
		return badSubscribe("exclude goes with sessions [\"all\"] only; a list of sessions names what it watches.")
	}
	if !in.all {
		in.refs = refs
	}
	return nil
}

// parseSubMinutes reads stalled_minutes, heartbeat_minutes and
// digest_minutes (1–1440 each, spec §14).
func parseSubMinutes(a *args, in *subscribeArgs, stalledDefault int) *Error {
	minutes := func(k string, hi int, def int) (int, *Error) {
		n, ok, e := a.integer(k)
		if e != nil {
			return 0, badSubscribe("%s must be a whole number of minutes.", k)
		}
		if !ok {
			return def, nil
		}
		if n < 1 || n > hi {
			return 0, badSubscribe("%s must be between 1 and %d (got %d).", k, hi, n)
		}
		return n, nil
	}
	var e *Error
	if in.stalled, e = minutes("stalled_minutes", 1440, stalledDefault); e != nil {
		return e
	}
	if in.heartbeat, e = minutes("heartbeat_minutes", 1440, 0); e != nil {
		return e
	}
	if in.digest, e = minutes("digest_minutes", 1440, 0); e != nil {
		return e
	}
	return nil
}

// checkSubscribe applies subscribe's rules in order: targets exist, then
// self, then the subscriptions limit.
func (sb *subscriptions) checkSubscribe(ctx context.Context, c *caller, in *subscribeArgs) (*subscribePlan, *Error) {
	// Targets exist, then self.
	pl := &subscribePlan{}
	for _, ref := range in.refs {
		s, e := sb.relay.sessionByRef(ctx, ref)
		if e != nil {
			e.Msg = strings.Replace(e.Msg, nothingDone, nothingSubscribed, 1)
			return nil, e
		}
		if !slices.ContainsFunc(pl.watched, func(x *store.Session) bool { return x.ID == s.ID }) {
			pl.watched = append(pl.watched, s)
		}
	}
	for _, ref := range in.excludeRefs {
		s, e := sb.relay.sessionByRef(ctx, ref)
		if e != nil {
			e.Msg = strings.Replace(e.Msg, nothingDone, nothingSubscribed, 1)
			return nil, e
		}
		pl.exclude = append(pl.exclude, s.ID)
	}
	for _, s := range pl.watched {
		if s.ID == c.s.ID {
			return nil, Errorf(CodeSelf, "A conversation cannot watch itself; leave out its own id. %s", nothingSubscribed)
		}
	}
	// Limits.
	active, err := sb.st.WatcherSubscriptions(ctx, c.s.ID)
	if err != nil {
		return nil, internal("checkSubscribe: WatcherSubscriptions", err)
	}
	if len(active) >= sb.opts.Limits.SubscriptionsPerConversation {
		return nil, Errorf(CodeLimit, "This conversation already has %d subscriptions, the most it may have; unsubscribe from one first. %s",
			len(active), nothingSubscribed)
	}
	return pl, nil
}

// subscribeCardLine is a subscribe card's first line: what is watched, for
// which events; where names a paired relay's (` on relay "NAME"`, made safe
// for a line), "" on this relay.
func subscribeCardLine(watched []*store.Session, all bool, events []string, where string) string {
	what := "all sessions"
	if !all {
		var names []string
		for _, s := range watched {
			names = append(names, fmt.Sprintf(`"%s" (%s)`, LineValue(s.Title, fieldTitle), lineID(s.ID)))
		}
		what = strings.Join(names, ", ")
	}
	kinds := make([]string, len(events))
	for i, k := range events {
		kinds[i] = LineValue(k, fieldWord)
	}
	return fmt.Sprintf("Watch %s%s for %s", what, where, strings.Join(kinds, ", "))
}

// cardSubscribe asks the owner when a card is needed.
func (sb *subscriptions) cardSubscribe(ctx context.Context, c *caller, in *subscribeArgs, pl *subscribePlan) *Error {
	// Card: the first subscribe of a conversation names its options (R5.2.2, R5.4).
	opts := subOptions(in.digest, in.q, len(pl.exclude))
	need := &cardNeed{}
	ok, err := sb.st.Flag(ctx, c.s.ID, "subscribed")
	if err != nil {
		return internal("cardSubscribe: Flag", err)
	}
	if !ok {
		need.add("This is the first time this conversation watches sessions.")
		need.flags = append(need.flags, "subscribed")
	}
	lines := []string{subscribeCardLine(pl.watched, in.all, in.events, "")}
	if opts != "" {
		lines = append(lines, opts)
	}
	return sb.cards.askCard(ctx, c, &cardAsk{need: need, action: actSubscribe, lines: lines, nothing: nothingSubscribed})
}

// applySubscribe writes the subscription (the limit checked again) and
// schedules its first heartbeat.
func (sb *subscriptions) applySubscribe(ctx context.Context, c *caller, in *subscribeArgs, pl *subscribePlan) (*result, *Error) {
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	sub := &store.Subscription{ID: "sub_" + store.NewID(5), Watcher: c.s.ID, All: in.all, Exclude: pl.exclude, Events: in.events,
		Once: in.once, Match: in.match, StalledMinutes: in.stalled, HeartbeatMinutes: in.heartbeat, DigestMinutes: in.digest,
		Quiet: in.quiet, CreatedAt: sb.now()}
	for _, s := range pl.watched {
		sub.Sessions = append(sub.Sessions, s.ID)
	}
	// The limit again, checked and written in one step (R18.6).
	if err := sb.st.AddSubscription(ctx, sub, sb.opts.Limits.SubscriptionsPerConversation); err != nil {
		if le, ok := store.IsLimit(err); ok {
			return nil, Errorf(CodeLimit, "This conversation already has %d subscriptions, the most it may have; unsubscribe from one first. %s",
				le.Count, nothingSubscribed)
		}
		return nil, internal("applySubscribe: AddSubscription", err)
	}
	sb.relay.notifySub(ctx, sub) // the owner's console (R19.6)
	if in.heartbeat > 0 {
		at := sub.CreatedAt.Add(time.Duration(in.heartbeat) * time.Minute)
		if err := sb.pipeline.schedule(ctx, jobs.TypeHeartbeat, jobs.HeartbeatPayload{Sub: sub.ID, At: at.UnixMilli()}, fmt.Sprintf("hb:%s:%d", sub.ID, at.UnixMilli()), at); err != nil {
			return nil, internal("applySubscribe: schedule", err)
		}
	}
	n := "all sessions"
	if !in.all {
		n = plural(len(pl.watched), "session", "sessions")
	}
	view, err := sb.subView(ctx, sub)
	if err != nil {
		return nil, internal("applySubscribe: subView", err)
	}
	return newResult("", fmt.Sprintf("%s (%s)", n, sub.ID)).with(&subscribeResult{Subscription: view}), nil
}

// subOptions names a subscription's options for its card (R5.4).
func subOptions(digest int, q *scheduler.Quiet, excluded int) string {
	var parts []string
	if digest > 0 {
		parts = append(parts, fmt.Sprintf("digest every %d min", digest))
	}
	if q != nil {
		parts = append(parts, "quiet "+q.String())
	}
	if excluded > 0 {
		parts = append(parts, fmt.Sprintf("except %d it leaves out", excluded))
	}
	return strings.Join(parts, ", ")
}

// subSessions is what a subscription watches, each session with its title.
func (sb *subscriptions) subSessions(ctx context.Context, sub *store.Subscription) (relay.WatchedSessions, error) {
	if sub.All {
		return relay.WatchedSessions{All: true}, nil // as the seed shows it
	}
	list := []relay.SessionRef{}
	if sub.Relay != "" {
		// A mirror: the sessions are on its relay, named as it named them.
		for i, id := range sub.Sessions {
			title := ""
			if i < len(sub.Titles) {
				title = sub.Titles[i]
			}
			list = append(list, relay.SessionRef{ID: id, Title: title})
		}
		return relay.WatchedSessions{List: list}, nil
	}
	ss, err := sb.st.GetSessions(ctx, sub.Sessions)
	if err != nil {
		return relay.WatchedSessions{}, err
	}
	for i, s := range ss {
		title := ""
		if s != nil {
			title = s.Title
		}
		list = append(list, relay.SessionRef{ID: sub.Sessions[i], Title: title})
	}
	return relay.WatchedSessions{List: list}, nil
}

func subScope(sub *store.Subscription) string {
	if sub.All {
		return "all"
	}
	return "sessions"
}

func quietHours(q *store.Quiet) *relay.QuietHours {
	if q == nil {
		return nil
	}
	return &relay.QuietHours{From: q.From, To: q.To, TZ: q.TZ}
}

// subView is a subscription as subscribe answers it.
func (sb *subscriptions) subView(ctx context.Context, sub *store.Subscription) (*relay.Subscription, error) {
	sessions, err := sb.subSessions(ctx, sub)
	if err != nil {
		return nil, err
	}
	v := &relay.Subscription{ID: sub.ID, Scope: subScope(sub), Sessions: sessions, Events: sub.Events, Once: sub.Once,
		StalledMinutes: sub.StalledMinutes, CreatedAt: tsPtr(sub.CreatedAt), Match: sub.Match, QuietHours: quietHours(sub.Quiet),
		Relay: sub.Relay}
	if sub.HeartbeatMinutes > 0 {
		v.HeartbeatMinutes = sub.HeartbeatMinutes
	}
	if sub.DigestMinutes > 0 {
		v.DigestMinutes = sub.DigestMinutes
	}
	if len(sub.Exclude) > 0 {
		v.Exclude = sub.Exclude
	}
	return v, nil
}

// positive is n, or nil (null) when not above 0.
func positive(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

// subListItem is a subscription as list_subscriptions lists it (R8.23):
// every field shows, null or zero when unset.
func (sb *subscriptions) subListItem(ctx context.Context, sub *store.Subscription) (*relay.SubscriptionItem, error) {
	sessions, err := sb.subSessions(ctx, sub)
	if err != nil {
		return nil, err
	}
	v := &relay.SubscriptionItem{ID: sub.ID, Scope: subScope(sub), Sessions: sessions, Events: sub.Events, Once: sub.Once,
		StalledMinutes: sub.StalledMinutes, CreatedAt: tsPtr(sub.CreatedAt), Match: strPtr(sub.Match), QuietHours: quietHours(sub.Quiet),
		HeartbeatMinutes: positive(sub.HeartbeatMinutes), DigestMinutes: positive(sub.DigestMinutes), Relay: sub.Relay}
	if len(sub.Exclude) > 0 {
		v.Exclude = sub.Exclude
	}
	n, due, err := sb.st.HeldInfo(ctx, sub.ID)
	if err != nil {
		return nil, err
	}
	if sub.EndReason != "" {
		v.EndReason = sub.EndReason
		v.EndedAt = tsPtr(sub.EndedAt)
		if n > 0 {
			v.HeldCount, v.NextDeliveryAt = &n, relay.Show(tsPtr(due))
		}
		return v, nil
	}
	v.HeldCount = &n
	v.NextDeliveryAt = relay.Show[string](nil)
	if n > 0 {
		v.NextDeliveryAt = relay.Show(tsPtr(due))
	}
	return v, nil
}

func (sb *subscriptions) unsubscribe(ctx context.Context, c *caller, a *args) (*result, *Error) {
	id, e := a.str("subscription_id")
	if e != nil {
		return nil, e
	}
	if id == "" {
		return nil, Errorf(CodeInvalidInput, `subscription_id is required: an id from list_subscriptions, or "all". Nothing was done.`)
	}
	subs, err := sb.st.WatcherSubscriptions(ctx, c.s.ID)
	if err != nil {
		return nil, internal("unsubscribe: WatcherSubscriptions", err)
	}
	var ended []string
	for _, sub := range subs {
		if strings.EqualFold(id, "all") || sub.ID == id || (len(id) >= 8 && strings.HasPrefix(sub.ID, id)) {
			if err := sb.endSubscription(ctx, sub, "unsubscribed"); err != nil {
				return nil, internal("unsubscribe: endSubscription", err)
			}
			ended = append(ended, sub.ID)
		}
	}
	if len(ended) == 0 && !strings.EqualFold(id, "all") {
		return nil, Errorf(CodeNotFound, "This conversation has no active subscription %q. Nothing was done.", id)
	}
	return newResult("", fmt.Sprintf("%s ended", plural(len(ended), "subscription", "subscriptions"))).
		with(&unsubscribeResult{Unsubscribed: nonNil(ended)}), nil
}

// endSubscription ends a subscription with a reason (R8.19), on the record
// as stored: ended meanwhile (another process, the owner), the first reason
// stays and sub becomes that record.
func (sb *subscriptions) endSubscription(ctx context.Context, sub *store.Subscription, reason string) error {
	if sub.EndReason != "" {
		return nil
	}
	ended, err := sb.st.EndSubscription(ctx, sub, reason, sb.now())
	if err != nil {
		return err
	}
	if ended {
		sb.relay.notifySub(ctx, sub) // the owner's console (R19.6)
	}
	return nil
}

// Unsubscribe is the owner's DELETE /subscriptions/{id}.
func (sb *subscriptions) Unsubscribe(ctx context.Context, id string) (*relay.Ended, error) {
	sub, err := sb.st.GetSubscription(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, Errorf(CodeNotFound, "No subscription %q. Nothing was done.", id)
	}
	if err != nil {
		return nil, err
	}
	if sub.Relay != "" {
		return sb.relay.unsubscribeMirror(ctx, sub) // held on a paired relay: it ends there too
	}
	if err := sb.endSubscription(ctx, sub, "unsubscribed"); err != nil {
		return nil, err
	}
	return &relay.Ended{ID: sub.ID, EndReason: sub.EndReason}, nil
}

func (sb *subscriptions) listSubscriptions(ctx context.Context, c *caller, a *args) (*result, *Error) {
	watcher := c.s.ID
	if ref, e := a.str("watcher"); e != nil {
		return nil, e
	} else if ref != "" && c.remote != nil {
		// Another relay's agent names a conversation on its own relay (its
		// stand-in here), never one of this relay's (R18.21).
		watcher = peerConversation(c.remote.Relay, ref)
	} else if ref != "" {
		s, e := sb.relay.sessionByRef(ctx, ref)
		if e != nil {
			return nil, e
		}
		watcher = s.ID
	}
	list, err := sb.SubscriptionList(ctx, watcher)
	if err != nil {
		return nil, internal("listSubscriptions: SubscriptionList", err)
	}
	active := 0
	for _, v := range list {
		if v.EndReason == "" {
			active++
		}
	}
	res := newResult("", fmt.Sprintf("%d active, %d ended in the last hour", active, len(list)-active))
	if watcher != c.s.ID {
		res.session = watcher
	}
	return res.with(&listSubscriptionsResult{Subscriptions: list}), nil
}

// SubscriptionList lists a conversation's subscriptions: active ones and those ended within the hour.
func (sb *subscriptions) SubscriptionList(ctx context.Context, watcher string) ([]*relay.SubscriptionItem, error) {
	subs, err := sb.st.WatcherSubscriptions(ctx, watcher)
	if err != nil {
		return nil, err
	}
	ended, err := sb.st.EndedSubscriptions(ctx, watcher, sb.now().Add(-endedListWindow))
	if err != nil {
		return nil, err
	}
	list := []*relay.SubscriptionItem{}
	for _, sub := range append(subs, ended...) {
		v, err := sb.subListItem(ctx, sub)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	return list, nil
}

func (sb *subscriptions) transferSubscriptions(ctx context.Context, c *caller, a *args) (*result, *Error) {
	from, subs, e := sb.checkTransfer(ctx, c, a)
	if e != nil {
		return nil, e
	}
	need := &cardNeed{}
	need.add("Moving subscriptions always needs your approval.")
	if e := sb.cards.askCard(ctx, c, &cardAsk{need: need, action: a.action,
		lines:   []string{fmt.Sprintf("Move %s of %q (%s) into this conversation", plural(len(subs), "subscription", "subscriptions"), from.Title, id8(from.ID))},
		nothing: "Nothing was moved."}); e != nil {
		return nil, e
	}
	ctx = context.WithoutCancel(ctx) // approved: the effect completes even if the client goes away (R18.12)
	var moved []*relay.Subscription
	var ended []string
	for _, old := range subs {
		nu := *old
		nu.ID = "sub_" + store.NewID(5)
		nu.Watcher = c.s.ID
		nu.CreatedAt = sb.now()
		nu.Sessions = slices.DeleteFunc(slices.Clone(old.Sessions), func(s string) bool { return s == c.s.ID })
		if err := sb.endSubscription(ctx, old, "transferred"); err != nil {
			return nil, internal("transferSubscriptions: endSubscription", err)
		}
		if !nu.All && len(nu.Sessions) == 0 {
			// It watched only the caller, which never watches itself: it
			// ends on the old side and has no copy here (R8.24).
			ended = append(ended, old.ID)
			continue
		}
		if err := sb.st.SaveSubscription(ctx, &nu); err != nil {
			return nil, internal("transferSubscriptions: SaveSubscription", err)
		}
		// Events the old one held (digest, quiet hours) go along.
		due, err := sb.st.MoveHeld(ctx, old.ID, nu.ID)
		if err != nil {
			return nil, internal("transferSubscriptions: MoveHeld", err)
		}
		if !due.IsZero() {
			if err := sb.pipeline.schedule(ctx, jobs.TypeRelease, jobs.ReleasePayload{Sub: nu.ID}, fmt.Sprintf("rel:%s:%d", nu.ID, due.UnixMilli()), due); err != nil {
				return nil, internal("transferSubscriptions: schedule", err)
			}
		}
		v, err := sb.subView(ctx, &nu)
		if err != nil {
			return nil, internal("transferSubscriptions: subView", err)
		}
		v.MovedFrom = old.ID // a paired relay's caller moves its mirror along
		moved = append(moved, v)
	}
	if moved == nil {
		moved = []*relay.Subscription{}
	}
	tr := &transferResult{Subscriptions: moved}
	res := newResult(from.ID, fmt.Sprintf("%s moved", plural(len(moved), "subscription", "subscriptions"))).with(tr)
	if len(ended) > 0 {
		tr.Ended, tr.Note = ended, fmt.Sprintf("%s watched only this conversation, which never watches itself: ended (transferred) without a copy here.",
			plural(len(ended), "subscription", "subscriptions"))
		res.what += fmt.Sprintf(", %d ended without a copy", len(ended))
	}
	return res, nil
}

// endSubscriptionsFor ends what archiving a session ends (R7.16, R8.19): the
// subscriptions it holds as watcher, and those watching only it (a list ends
// when all its sessions are archived).
func (sb *subscriptions) endSubscriptionsFor(ctx context.Context, sid, reason string) error {
	own, err := sb.st.WatcherSubscriptions(ctx, sid)
	if err != nil {
		return err
	}
	for _, sub := range own {
		if err := sb.endSubscription(ctx, sub, reason); err != nil {
			return err
		}
	}
	watching, err := sb.st.SubscriptionsOf(ctx, sid)
	if err != nil {
		return err
	}
	for _, sub := range watching {
		if sub.All {
			continue
		}
		ss, err := sb.st.GetSessions(ctx, sub.Sessions)
		if err != nil {
			return err
		}
		allArchived := true
		for _, s := range ss {
			if s != nil && !s.Archived && s.ID != sid {
				allArchived = false
			}
		}
		if allArchived {
			if err := sb.endSubscription(ctx, sub, reason); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkTransfer applies transfer_subscriptions' checks (from, self, the
// limit) and returns the conversation it moves from and its subscriptions;
// nothing is written (also the check a paired relay asks before its card,
// R5.3).
func (sb *subscriptions) checkTransfer(ctx context.Context, c *caller, a *args) (*store.Session, []*store.Subscription, *Error) {
	if isExternal(c.s) {
		return nil, nil, notWakeable(a.action, "Nothing was moved.")
	}
	from, e := sb.transferFrom(ctx, c, a)
	if e != nil {
		return nil, nil, e
	}
	if from.ID == c.s.ID {
		return nil, nil, Errorf(CodeSelf, "from names this conversation itself; its subscriptions are already here. Nothing was moved.")
	}
	subs, err := sb.st.WatcherSubscriptions(ctx, from.ID)
	if err != nil {
		return nil, nil, internal("checkTransfer: WatcherSubscriptions", err)
	}
	mine, err := sb.st.WatcherSubscriptions(ctx, c.s.ID)
	if err != nil {
		return nil, nil, internal("checkTransfer: WatcherSubscriptions", err)
	}
	if len(mine)+len(subs) > sb.opts.Limits.SubscriptionsPerConversation {
		return nil, nil, Errorf(CodeLimit, "Moving %d subscriptions would give this conversation more than %d. Nothing was moved.",
			len(subs), sb.opts.Limits.SubscriptionsPerConversation)
	}
	return from, subs, nil
}

// transferFrom is the conversation transfer_subscriptions moves from: a
// session here, or for another relay's agent a conversation on its own
// relay (its stand-in here, R13.1; that relay checked it).
func (sb *subscriptions) transferFrom(ctx context.Context, c *caller, a *args) (*store.Session, *Error) {
	if c.remote == nil {
		return sb.relay.target(ctx, a, "from")
	}
	ref, e := a.str("from")
	if e != nil {
		return nil, e
	}
	if ref == "" {
		return nil, Errorf(CodeInvalidInput, "from is required: the id of a conversation on your relay. Nothing was moved.")
	}
	return &store.Session{ID: peerConversation(c.remote.Relay, ref), Title: ref}, nil
}
