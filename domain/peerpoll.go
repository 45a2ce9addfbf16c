package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oar/relay/store"
)

// Polling paired relays, in every process (a short Redis lock per item makes
// one process poll it at a time): the events of subscriptions this relay's
// conversations hold there (R8.20, R8.21), the asks they made there (R10.5),
// and the link state of each pairing for list_relays.

const (
	healthEvery = 30 * time.Second // hello to each pairing this often (list_relays' online)
	askLockTTL  = time.Minute
)

// pollWorkers is how many polls of paired relays (a remote subscription's
// events, an ask's answer, a pairing's hello) a process runs at once: a
// fixed set of goroutines, whatever the number of subscriptions, asks and
// pairings. The others wait their turn in the order listed (or another
// process takes them: the lock); a paired relay that does not answer holds a
// worker for its timeout.
const pollWorkers = 16

// pollPool runs polls on a fixed number of goroutines. A poll is known by
// its key: one already waiting or running is not offered again.
type pollPool struct {
	jobs chan pollJob
	wg   sync.WaitGroup
	mu   sync.Mutex
	busy map[string]bool // keys offered and not yet done
}

type pollJob struct {
	key string
	run func(context.Context)
}

// newPollPool starts n workers running offered polls with ctx; stop joins them.
func newPollPool(ctx context.Context, n int) *pollPool {
	p := &pollPool{jobs: make(chan pollJob), busy: map[string]bool{}}
	p.wg.Add(n)
	for range n {
		go func() {
			defer p.wg.Done()
			for j := range p.jobs {
				j.run(ctx)
				p.mu.Lock()
				delete(p.busy, j.key)
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// offer hands a poll to the next free worker, waiting for one until ctx
// ends; a key already waiting or running is skipped. It is called from one
// goroutine (the loop), never after stop.
func (p *pollPool) offer(ctx context.Context, key string, run func(context.Context)) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	if p.busy[key] {
		p.mu.Unlock()
		return
	}
	p.busy[key] = true
	p.mu.Unlock()
	select {
	case p.jobs <- pollJob{key, run}:
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.busy, key)
		p.mu.Unlock()
	}
}

// stop ends the workers once the polls they run have ended.
func (p *pollPool) stop() {
	close(p.jobs)
	p.wg.Wait()
}

// peerLoop runs until ctx ends; every poll it started has ended when it
// returns. Polls run on pollWorkers goroutines. While there is nothing to
// poll (no pairing, remote subscription or ask) it looks again only every
// healthEvery, or at once when this process pairs a relay (wakePoll): an idle
// relay with no pairings asks nothing every 3 s (R25.4, issue 36). A pairing
// made by another process of the relay is polled by that one meanwhile.
func (pk *peerLink) peerLoop(ctx context.Context) {
	every := pk.opts.Timing.PeerPoll
	if every <= 0 {
		every = 3 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	pool := newPollPool(ctx, pollWorkers)
	defer pool.stop()
	spawn := func(key string, ttl time.Duration, f func(context.Context)) {
		pool.offer(ctx, key, func(ctx context.Context) {
			ok, err := pk.st.TryLock(ctx, key, ttl)
			if err != nil || !ok {
				return
			}
			defer func() {
				if err := pk.st.ReleaseLock(context.WithoutCancel(ctx), key); err != nil {
					pk.log.Warn("release poll lock", "key", key, "err", err)
				}
			}()
			f(ctx)
		})
	}
	var ps pollState
	idle := false
	for {
		if idle {
			tick.Stop()
			t := time.NewTimer(healthEvery)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-pk.pollWake:
			case <-t.C:
			}
			t.Stop()
			tick.Reset(every)
		} else {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		idle = pk.pollOnce(ctx, every, &ps, spawn)
	}
}

// wakePoll ends the poll loop's rest (a pairing was made in this process).
func (pk *peerLink) wakePoll() {
	select {
	case pk.pollWake <- struct{}{}:
	default:
	}
}

// pollState is what the poll loop keeps between rounds.
type pollState struct {
	lastHealth time.Time // the last round that said hello to each pairing
	// pairings is how many relays were paired when last read: by the hello
	// round (every healthEvery), or, while it was 0, before each rest.
	pairings int
}

// pollOnce offers the polls due now: each remote subscription, each ask
// whose next poll is due, and every healthEvery a hello to each pairing. It
// says whether there was nothing to poll (no pairing, subscription or ask).
// A relay unpaired meanwhile is seen at the next hello round.
func (pk *peerLink) pollOnce(ctx context.Context, every time.Duration, st *pollState,
	spawn func(key string, ttl time.Duration, f func(context.Context))) (nothing bool) {
	subs, err := pk.st.RemoteSubscriptions(ctx)
	if err != nil {
		pk.log.Warn("remote subscriptions unreadable", "err", err)
		return false
	}
	for _, s := range subs {
		s := s
		spawn("rsub:"+s.ID, 2*pk.opts.Timing.PeerTimeout+every, func(ctx context.Context) { pk.pollMirror(ctx, s.ID) })
	}
	asks, aerr := pk.st.RemoteAsks(ctx) // unreadable: no ask polled this round
	now := pk.now()
	for _, a := range asks {
		if !a.NextPollAt.After(now) {
			a := a
			spawn("rask:"+a.ID, askLockTTL, func(ctx context.Context) { pk.pollAsk(ctx, a) })
		}
	}
	read := false // the pairings were read this round
	if time.Since(st.lastHealth) >= healthEvery {
		st.lastHealth = time.Now()
		if ps, err := pk.st.Pairings(ctx); err == nil {
			st.pairings, read = len(ps), true
			for _, p := range ps {
				p := p
				spawn("hello:"+strings.ToLower(p.Name), healthEvery-time.Second, func(ctx context.Context) {
					h, e := pk.hello(ctx, p.Name, p.URL, p.Token, helloTimeout)
					if e == nil || e.Code == CodeOffline || e.Code == CodeAuth {
						pk.link(ctx, p, e)
					}
					if e == nil {
						pk.refreshPairing(ctx, p.Name, h)
					}
				})
			}
		}
	}
	if aerr != nil || len(subs) > 0 || len(asks) > 0 {
		return false
	}
	if st.pairings == 0 && !read { // none when last read: one made since (here, or by another process)?
		n, err := pk.st.PairingCount(ctx)
		if err != nil {
			return false
		}
		st.pairings = int(n)
	}
	return st.pairings == 0
}

// pollMirror reads a remote subscription's new events and offers them here,
// where digest and quiet hours apply (R8.21). After a lost link, what comes
// is one message between link_lost and link_restored, each event replayed.
func (pk *peerLink) pollMirror(ctx context.Context, id string) {
	sub, p := pk.liveMirror(ctx, id)
	if sub == nil {
		return
	}
	evs, cursor, ended, ok := pk.readMirror(ctx, sub, p)
	if !ok {
		return
	}
	if err := pk.offerRemote(ctx, sub, p, evs); err != nil {
		pk.log.Error("deliver remote events", "relay", p.Name, "sub", sub.ID, "err", err)
		return // the cursor stays: they come again and are delivered once (R8.12)
	}
	pk.advanceMirror(ctx, id, cursor, ended)
}

// liveMirror reads a mirror to poll and its pairing; nil when there is none
// to poll. A mirror whose pairing or watcher is gone ends here (R8.19).
func (pk *peerLink) liveMirror(ctx context.Context, id string) (*store.Subscription, *store.Pairing) {
	sub, err := pk.st.GetSubscription(ctx, id)
	if err != nil || sub.EndReason != "" || sub.Relay == "" {
		return nil, nil
	}
	p, err := pk.st.GetPairing(ctx, sub.Relay)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			pk.relay.endMirror(ctx, sub, "unpaired")
		}
		return nil, nil
	}
	// The watcher was archived or deleted: the subscription ends on both sides (R8.19).
	ws, err := pk.st.GetSession(ctx, sub.Watcher)
	if (err == nil && ws.Archived) || errors.Is(err, store.ErrNotFound) {
		pk.relay.remoteUnsubscribe(ctx, p, sub)
		pk.relay.endMirror(ctx, sub, "archived")
		return nil, nil
	}
	return sub, p
}

// readMirror reads every page there is now before anything is offered, so
// what a lost link kept comes as one message (R8.21, up to 500 events). It
// returns the events taken, the cursor after them and the end reason the
// relay gave; not ok when nothing is to be offered (the cursor stays).
func (pk *peerLink) readMirror(ctx context.Context, sub *store.Subscription, p *store.Pairing) (evs []store.Event, cursor, ended string, ok bool) {
	cursor = sub.Cursor
	read := 0 // what the relay sent this poll: at most peerPollMax (R18.33)
	for page := 0; read < peerPollMax; page++ {
		pe, e := pk.peerEvents(ctx, p, sub.ID, cursor, 0)
		if e != nil {
			pk.mirrorReadFailed(ctx, sub, p, page, e)
			return nil, "", "", false // the cursor stays: the next poll reads it all again
		}
		got := pe.Events
		if len(got) > peerPollMax-read {
			got = got[:peerPollMax-read] // a relay that sends more than it may: the rest is lost (R18.33)
		}
		read += len(pe.Events)
		evs = append(evs, mirrorEvents(sub, p, got)...)
		cursor = pe.Cursor
		if len(pe.Events) < peerEventsBatch {
			ended = pe.Ended
			break
		}
	}
	return evs, cursor, ended, true
}

// mirrorReadFailed handles a failed read of a mirror's events: gone there,
// the mirror ends; otherwise a first failure marks the link down.
func (pk *peerLink) mirrorReadFailed(ctx context.Context, sub *store.Subscription, p *store.Pairing, page int, e *Error) {
	if e.Code == CodeNotFound {
		pk.log.Info("remote subscription gone on its relay", "relay", p.Name, "sub", sub.ID)
		pk.relay.endMirror(ctx, sub, "unsubscribed")
		return
	}
	if page == 0 && sub.LinkDownAt.IsZero() {
		sub.LinkDownAt = pk.now()
		if _, err := pk.st.SaveLiveSubscription(ctx, sub); err != nil {
			pk.log.Warn("mark link down", "sub", sub.ID, "err", err)
		}
		pk.log.Warn("link to paired relay lost", "relay", p.Name, "sub", sub.ID, "reason", e.Msg)
	}
}

// mirrorEvents are the events of a page a mirror takes, as this relay
// keeps them.
func mirrorEvents(sub *store.Subscription, p *store.Pairing, got []store.Event) []store.Event {
	var evs []store.Event
	for _, ev := range got {
		if !mirrorTakes(sub, &ev) {
			continue // filtered here, whatever the relay sent (R18.33, R8.21's exclude)
		}
		// Its ids are that relay's: namespaced, they never name a record here (R18.34).
		ev.ID = "peer:" + strings.ToLower(p.Name) + ":" + ev.ID
		ev.Relay, ev.Turn = p.Name, ""
		ev.Sub, ev.Watcher = sub.ID, "" // the same id on both relays: all_idle and heartbeat lines name it
		evs = append(evs, ev)
	}
	return evs
}

// advanceMirror keeps a mirror's cursor after its events were offered, and
// ends it when its relay ended it.
func (pk *peerLink) advanceMirror(ctx context.Context, id, cursor, ended string) {
	fresh, err := pk.st.GetSubscription(ctx, id)
	if err != nil {
		return
	}
	fresh.Cursor, fresh.LinkDownAt = cursor, time.Time{}
	// Saved only while the mirror is live: an unpairing or unsubscribe that
	// ended it since the read above stays ended (and the cursor stays, which
	// the next poll of a live mirror reads again; delivered once, R8.12).
	if saved, err := pk.st.SaveLiveSubscription(ctx, fresh); err != nil || !saved {
		if err != nil {
			pk.log.Warn("save remote cursor", "sub", id, "err", err)
		}
		return
	}
	if ended != "" {
		pk.relay.endMirror(ctx, fresh, ended)
	}
}

// peerPollMax is the most events one poll of a remote subscription reads
// (R18.33; the replay a relay keeps per subscription, R8.21).
const peerPollMax = 500

// mirrorTakes reports whether a remote subscription takes an event its
// relay sent (R18.33): of the subscription's own events (the default ones
// when it named none) and of its sessions (all but those it excludes, or
// those it names); all_idle and heartbeat name no session. link_lost and
// link_restored are this relay's own lines, never a paired relay's (R18.34).
func mirrorTakes(sub *store.Subscription, ev *store.Event) bool {
	kinds := sub.Events
	if len(kinds) == 0 {
		kinds = defaultEvents
	}
	if ev.Kind == EvLinkLost || ev.Kind == EvLinkRestored || !slices.Contains(kinds, ev.Kind) {
		return false
	}
	if ev.Session == "" {
		return ev.Kind == EvAllIdle || ev.Kind == EvHeartbeat
	}
	if mirrorExcludes(sub, ev.Session) {
		return false // exclude applied here too (R8.21), for a relay that does not know it
	}
	return sub.All || slices.ContainsFunc(sub.Sessions, func(ref string) bool { return sessionRefMatches(ref, ev.Session) })
}

func (pk *peerLink) offerRemote(ctx context.Context, sub *store.Subscription, p *store.Pairing, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if sub.LinkDownAt.IsZero() {
		return pk.offerPoll(ctx, sub, evs)
	}
	// The link is back: replayed events in one message, those the
	// subscription's digest or quiet hours hold come later (R8.21), as
	// offer would hold them: a digest already due takes them all now.
	now := pk.now()
	first := sub.LinkDownAt
	for i := range evs {
		evs[i].Replayed = true
		if evs[i].At.Before(first) {
			first = evs[i].At
		}
	}
	batch, _, err := pk.holdOrTake(ctx, sub, evs, now)
	if err != nil {
		return err
	}
	held := len(evs) - len(batch)
	mark := sub.LinkDownAt.UnixMilli()
	lost := store.Event{ID: fmt.Sprintf("lost_%s_%d", sub.ID, mark), Kind: EvLinkLost, Relay: p.Name, At: first.Add(-time.Millisecond)}
	restored := store.Event{ID: fmt.Sprintf("restored_%s_%d", sub.ID, mark), Kind: EvLinkRestored, Relay: p.Name, At: now.Add(time.Millisecond),
		Text: fmt.Sprintf("link_restored: %s, %d held for later", plural(len(evs), "replayed event", "replayed events"), held)}
	for i := range batch {
		if !batch[i].At.After(lost.At) {
			batch[i].At = lost.At.Add(time.Microsecond)
		}
		// The other relay's clock may run ahead of this one's: link_restored
		// still ends the message (lines go oldest first).
		if !restored.At.After(batch[i].At) {
			restored.At = batch[i].At.Add(time.Millisecond)
		}
	}
	all := append(append([]store.Event{lost}, batch...), restored)
	pk.log.Info("link to paired relay restored", "relay", p.Name, "sub", sub.ID, "replayed", len(evs), "held", held)
	return pk.pipeline.releasePeer(ctx, sub, store.Batch{Kind: "plain", Sub: sub.ID, Events: all, Urgent: true})
}

// offerPoll offers the events of one poll as one message (R18.33): those
// the subscription's digest or quiet hours hold wait for them, as offer
// would hold them; the rest go together, and urgent ones wake the watcher
// at most once per coalescing window (releasePeer).
func (pk *peerLink) offerPoll(ctx context.Context, sub *store.Subscription, evs []store.Event) error {
	batch, isUrgent, err := pk.holdOrTake(ctx, sub, evs, pk.now())
	if err != nil || len(batch) == 0 {
		return err
	}
	return pk.pipeline.releasePeer(ctx, sub, store.Batch{Kind: "plain", Sub: sub.ID, Events: batch, Urgent: isUrgent})
}

// holdOrTake splits a paired relay's events as offer would: those the
// subscription's digest or quiet hours hold wait for them (R8.21); the rest
// are the batch to deliver now, urgent when one of them is. A batch with
// events the digest would have held is the digest: the next one is N
// minutes on.
func (pk *peerLink) holdOrTake(ctx context.Context, sub *store.Subscription, evs []store.Event, now time.Time) (batch []store.Event, isUrgent bool, err error) {
	due := holdDue(sub, now)
	holding := due.After(now)
	digested := false
	for i := range evs {
		ev := &evs[i]
		if !urgent(ev.Kind) && holding {
			if err := pk.pipeline.hold(ctx, sub, ev, due); err != nil {
				return nil, false, err
			}
			continue
		}
		digested = digested || !urgent(ev.Kind)
		isUrgent = isUrgent || urgent(ev.Kind)
		batch = append(batch, *ev)
	}
	if digested && sub.DigestMinutes > 0 {
		if err := pk.st.SetLastDigest(ctx, sub, now); err != nil {
			return nil, false, err
		}
	}
	return batch, isUrgent, nil
}

// pollAsk asks the paired relay whether an ask made there was answered (R10.5).
func (pk *peerLink) pollAsk(ctx context.Context, a *store.RemoteAsk) {
	p, err := pk.st.GetPairing(ctx, a.Relay)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			_, _ = pk.st.DeleteRemoteAsk(ctx, a.Relay, a.ID)
		}
		return
	}
	body := PeerCallBody{Action: "list_questions", Args: map[string]json.RawMessage{"session": quoteJSON(a.Session)},
		Origin: PeerOrigin{Relay: pk.opts.Name, Session: a.Asker, Path: []string{pk.opts.Name}}}
	env, e := pk.peerCall(ctx, p, body, pk.opts.Timing.PeerTimeout)
	if _, ok := answerOK(env); e != nil || !ok {
		a.NextPollAt = pk.now().Add(pk.opts.Timing.AskPollOffline) // every 30 s while it does not answer
		if err := pk.st.SaveRemoteAsk(ctx, a); err != nil {
			pk.log.Warn("save remote ask", "ask", a.ID, "err", err)
		}
		return
	}
	var q *answeredQuestion
	for _, x := range looseList(env["questions"]) {
		var m answeredQuestion
		decodeLoose(x, &m)
		if m.QuestionID == a.ID {
			q = &m
		}
	}
	status := ""
	if q != nil {
		status = q.Status
	}
	switch {
	case q == nil || status == "withdrawn":
		_, _ = pk.st.DeleteRemoteAsk(ctx, a.Relay, a.ID) // ended there (archived, deleted, withdrawn): nobody is told
		pk.relay.notify(ctx, "inbox")                    // but the owner's console drops it (R19.4)
	case status == "pending":
		a.NextPollAt = pk.now().Add(pk.opts.Timing.AskPoll)
		if err := pk.st.SaveRemoteAsk(ctx, a); err != nil {
			pk.log.Warn("save remote ask", "ask", a.ID, "err", err)
		}
	default:
		ok, err := pk.st.DeleteRemoteAsk(ctx, a.Relay, a.ID)
		if err != nil || !ok {
			return // another process told the asker
		}
		pk.relay.notify(ctx, "inbox") // answered there: the owner's console drops it (R19.4)
		answer, choice := q.Answer, q.Choice
		via := pk.viaHere(ctx, p, q.Via)
		pk.pipeline.emit(ctx, &store.Event{Kind: EvQuestionAnswered, Watcher: a.Asker, QuestionID: a.ID, Text: a.Question,
			Answer: answer, Choice: choice, Dismissed: status == "dismissed", Via: via})
	}
}

// refreshPairing keeps what a paired relay says of itself current (an
// upgrade brings new features; a pairing made offline learns its name).
func (pk *peerLink) refreshPairing(ctx context.Context, name string, h *Hello) {
	p, err := pk.st.GetPairing(ctx, name) // fresh: an owner's change in between is kept
	if err != nil {
		return
	}
	if p.Version == h.Version && p.RemoteName == h.Name && p.Instance == h.Instance && slices.Equal(p.Features, h.Features) &&
		p.PublicURL == h.PublicURL {
		return
	}
	p.Version, p.RemoteName, p.Instance, p.Features, p.PublicURL = h.Version, h.Name, h.Instance, append([]string{}, h.Features...), h.PublicURL
	if err := pk.st.SavePairing(ctx, p); err != nil {
		pk.log.Warn("refresh pairing", "relay", name, "err", err)
	}
}

// viaHere is the via of an answer a paired relay reported (R18.34): the
// relay whose inbox the owner answered in, named as this relay names it —
// this relay, or a relay paired here (by its name here); the paired relay
// itself when it names none; anything else is left out.
func (pk *peerLink) viaHere(ctx context.Context, p *store.Pairing, via string) string {
	switch {
	case via == "" || strings.EqualFold(via, p.Name) || strings.EqualFold(via, p.SelfName()):
		return p.Name
	case strings.EqualFold(via, pk.opts.Name):
		return pk.opts.Name
	}
	ps, err := pk.st.Pairings(ctx)
	if err != nil {
		return ""
	}
	for _, o := range ps {
		if strings.EqualFold(via, o.Name) || strings.EqualFold(via, o.SelfName()) {
			return o.Name
		}
	}
	return ""
}
