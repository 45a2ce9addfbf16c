package domain

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/oar/relay"
	"github.com/oar/relay/store"
)

// Notifications for the owner's console (R19.6): every change a page shows
// is announced on the relay's notification channel, whoever made it (an
// agent's tool call, the owner API, a schedule firing), so an open page
// shows it at once.

// notify announces one change on the relay's notification channel. A
// notification is a hint (a page reads the keys again), so one not sent does
// not fail the change: it is logged and counted (relay_notify_failures_total).
func (r *Relay) notify(ctx context.Context, what string) {
	if err := r.st.Notify(ctx, what); err != nil {
		r.log.Warn("notification not sent", "what", what, "err", err)
		if r.met != nil {
			r.met.NotifyFailed()
		}
	}
}

// notifySessions announces that these sessions changed ("session:ID"); a
// paired relay's conversation (its stand-in id) has no page here.
func (r *Relay) notifySessions(ctx context.Context, ids ...string) {
	for _, id := range unique(ids...) {
		if id != "" && !isPeerConversation(id) {
			r.notify(ctx, "session:"+id)
		}
	}
}

// notifySub announces a subscription that began or ended: its watcher's
// `watching N sessions` chip and the watched sessions' `watched` badges; one
// that watches all sessions changes every row ("sessions").
func (r *Relay) notifySub(ctx context.Context, sub *store.Subscription) {
	r.notifySessions(ctx, append([]string{sub.Watcher}, sub.Sessions...)...)
	if sub.All {
		r.notify(ctx, "sessions")
	}
}

// notifySchedule announces a schedule set, fired or ended: the ⏰ of the
// session it fires into and the list of the conversation that set it.
func (r *Relay) notifySchedule(ctx context.Context, sc *store.Schedule) {
	r.notifySessions(ctx, sc.Setter, sc.Target)
}

// notifyGroups announces a change to the groups themselves ("sessions"): a
// group made, renamed or dissolved, empty ones too, which no session's
// notification would bring to the sessions list.
func (r *Relay) notifyGroups(ctx context.Context) {
	r.notify(ctx, "sessions")
}

// NoticeSink receives the owner notifications (R23.10) besides the console's
// live stream: the webhooks (app gives it package webhook's Sender). Notice
// must not block: the domain calls it on the path of a card, an ask or a
// turn's end.
type NoticeSink interface {
	Notice(n relay.OwnerNotice)
}

// noticeText is how many characters of what waits, or of a reply, a notice
// carries (one line, R18.16).
const noticeText = fieldExcerpt

// ownerNotice tells the owner that something waits or is ready (R23.10): on
// the notification channel as "notice:{json}" (the console's live stream
// shows it as a browser notification) and to Options.Notices (the
// webhooks). title "" is read from the session.
func (r *Relay) ownerNotice(ctx context.Context, event, sid, title, text string) {
	if sid == "" || isPeerConversation(sid) {
		return
	}
	title = r.noticeTitle(ctx, sid, title)
	n := relay.OwnerNotice{At: r.now(), Event: event, Session: sid, Title: title, Text: LineValue(text, noticeText),
		OpenURL: r.pageURL(ctx, sid), Heading: relay.NoticeHeading(event, title)}
	if b, err := json.Marshal(n); err == nil {
		r.notify(ctx, "notice:"+string(b))
	}
	if r.opts.Notices != nil {
		r.opts.Notices.Notice(n)
	}
}

// noticeTitle is the session's title as a notice shows it, safe for one
// line (R18.16): title, or "" read from the session; "session ID8" when it
// has none.
func (r *Relay) noticeTitle(ctx context.Context, sid, title string) string {
	if title == "" {
		if s, err := r.st.GetSession(ctx, sid); err == nil {
			title = s.Title
		}
	}
	if title = LineValue(title, fieldTitle); title == "" {
		return "session " + id8(sid)
	}
	return title
}

// turnNotice is the notice of a turn's end (R23.10): a reply ready (done) or
// an error, only for a turn the owner or this relay's agents started — never
// for one a paired relay's agent sent (its caller is that relay's
// conversation, its from that relay). t nil: the turn is read.
func (r *Relay) turnNotice(ctx context.Context, s *store.Session, id string, t *store.Turn, status store.TurnStatus, text string) {
	event := map[store.TurnStatus]string{store.TurnDone: relay.NoticeReply, store.TurnError: relay.NoticeError}[status]
	if event == "" {
		return
	}
	if t == nil {
		var err error
		if t, err = r.st.GetTurn(ctx, id); err != nil {
			return
		}
	}
	if !r.startedHere(t) {
		return
	}
	r.ownerNotice(ctx, event, s.ID, s.Title, text)
}

// startedHere reports whether the owner or an agent of this relay started a
// turn (its prompt's caller and from), as against a paired relay's agent.
func (r *Relay) startedHere(t *store.Turn) bool {
	if isPeerConversation(t.Caller) {
		return false
	}
	return t.From == nil || t.From.Relay == "" || strings.EqualFold(t.From.Relay, r.opts.Name)
}
