package domain

import (
	"context"

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
