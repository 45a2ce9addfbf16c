package domain

import "time"

// The durations package relay waits, polls or keeps marks for, each named
// once with why it has its value. (leaseTTL, finishGiveUp, fullRetry,
// settingsTTL and tokenTTL are named beside the code they belong to.)
const (
	// Windows of the lists (spec §14 "list windows").

	// askListWindow: asks that ended within the last day still show (R10.6).
	askListWindow = 24 * time.Hour
	// endedListWindow: ended subscriptions and schedules show for an hour (R8.23, R9.7).
	endedListWindow = time.Hour

	// Waits of a tool call.

	// defaultMaxWait is the longest wait per tool call when the settings set none (spec §14: 600 s).
	defaultMaxWait = 600 * time.Second
	// recheckEvery: a blocked wait (a card, a reply, an ask_user question) reads its record
	// again this often, the safety net for a notification that was lost.
	recheckEvery = 2 * time.Second
	// waitingSlack: a prompt's "caller is waiting" mark (no echo, R8.18) outlives the
	// wait by this much, so it cannot lapse while the call is still waiting or answering.
	waitingSlack = time.Minute

	// Bounds of a write done outside a call's own context.

	// liveWriteTimeout bounds a best-effort live write (an activity line, a partial reply,
	// the agent CLI's conversation id): the next one comes soon.
	liveWriteTimeout = 2 * time.Second
	// detachedWriteTimeout bounds a write that must happen though the call's or job's
	// context is gone (withdraw a card, give back a slot, release a lease, task output).
	detachedWriteTimeout = 5 * time.Second
	// finishWriteTimeout bounds the writes of a turn's outcome and its events.
	finishWriteTimeout = 10 * time.Second

	// Once-only marks (SetOnce).

	// onceMarkKeep keeps the marks of a once subscription's firing and of an all_idle
	// transition a day longer than the default replay keep (7 days), so a replayed
	// event cannot set them off again.
	onceMarkKeep = 8 * 24 * time.Hour
	// occurrenceMarkKeep keeps the mark of one occurrence (a schedule firing, a stall of
	// one turn or task) a day: long past any retry of the same occurrence.
	occurrenceMarkKeep = 24 * time.Hour

	// Schedules and delivery.

	// scheduleRecheck: a held schedule firing, or a once schedule whose firing was
	// skipped, is looked at again after a minute (R9.6; spec §14: every 1 min).
	scheduleRecheck = time.Minute
	// overdueAfter: a schedule due longer ago than this has lost its task and is
	// enqueued again by RecoverSchedules (R9.3).
	overdueAfter = 30 * time.Second
	// earlyWaitMax: a task that runs at most this much before its due time waits for
	// it in place instead of being scheduled again.
	earlyWaitMax = 3 * time.Second

	// The notification hub.

	// notifyReadyTimeout: Start fails when Redis does not confirm the notification
	// subscription within this time.
	notifyReadyTimeout = 5 * time.Second
	// notifyRetry: a failed notification subscription is tried again after this pause.
	notifyRetry = time.Second
	// notifyHealthEvery: the subscription is PINGed after this long without a
	// message (go-redis's default, 3 s, made it a third of an idle relay's
	// commands, issue 36). A closed connection is seen at once without it, and
	// every waiter re-checks on its own every recheckEvery.
	notifyHealthEvery = 15 * time.Second

	// Deleting a session.

	// deleteDrainWait bounds how long a delete waits for the drain to end the
	// session's turns, so no turn end writes into a deleted session.
	deleteDrainWait = 15 * time.Second
	// deleteDrainPoll: the delete looks whether the session is quiet this often.
	deleteDrainPoll = 50 * time.Millisecond

	// Turns.

	// partialEvery: a running turn's partial reply is written at most this often.
	partialEvery = 200 * time.Millisecond
	// finishRetryFirst and finishRetryMax are the first and the longest pause between
	// tries to write a turn's outcome while Redis does not answer (doubling between).
	finishRetryFirst = 250 * time.Millisecond
	finishRetryMax   = 2 * time.Second
)
