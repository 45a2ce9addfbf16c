package domain

// The store as the domain sees it: each subsystem names the operations it
// uses, and Store is their sum. Package store implements it on Redis (the
// compile-time check below); the domain holds a Store, never the concrete
// type, so what a subsystem may touch is written here and a test can stand
// a subsystem's store in with a fake of one interface. An operation more
// than one subsystem uses is in recordStore.

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/store"
)

// Store is everything the domain needs from its store.
type Store interface {
	recordStore
	actionStore
	queueStore
	steerStore
	groupStore
	createStore
	tokenStore
	readStore
	mirrorStore
	drainStore
	deliveryStore
	subscriptionStore
	askStore
	cardStore
	taskStore
	mcpTaskStore
	updateStore
	usageStore
	scheduleStore
	peerStore
	ownerStore
	lifeStore
	killStore
}

var _ Store = (*store.Store)(nil)

// recordStore is what several subsystems read and write: the session,
// turn, card, ask, subscription and pairing records (with the sessions a
// subscription watches and its held events), the loop counts, the count of
// sessions at work, a turn put back at the head of its queue and a lease
// released (the drain and the turn queue), a question read and a turn's
// question mark cleared (the drain and the steering actions), the folders used, the settings and
// the notification channel.
type recordStore interface {
	AsksIn(ctx context.Context, sid string) ([]*store.Ask, error)
	BusyCount(ctx context.Context, orchestrator string) (int, error)
	ClearOnce(ctx context.Context, names ...string) error
	CreateSession(ctx context.Context, sess *store.Session) error
	CurrentTurn(ctx context.Context, sid string) (string, error)
	DecideCard(ctx context.Context, id string, decision string) (*store.Card, bool, error)
	EndSubscription(ctx context.Context, sub *store.Subscription, reason string, at time.Time) (ended bool, err error)
	Flag(ctx context.Context, sid string, name string) (bool, error)
	GetAsk(ctx context.Context, id string) (*store.Ask, error)
	GetGroup(ctx context.Context, id string) (*store.Group, error)
	GetPairing(ctx context.Context, name string) (*store.Pairing, error)
	GetQuestion(ctx context.Context, id string) (*store.Question, error)
	GetSession(ctx context.Context, id string) (*store.Session, error)
	GetSessions(ctx context.Context, ids []string) ([]*store.Session, error)
	GetSubscription(ctx context.Context, id string) (*store.Subscription, error)
	GetTurn(ctx context.Context, id string) (*store.Turn, error)
	GiveBackLoop(ctx context.Context, sid string) error
	HeldInfo(ctx context.Context, sub string) (int, time.Time, error)
	IncrLoop(ctx context.Context, sid string) (int, error)
	LastMessages(ctx context.Context, sid string, n int) ([]store.Message, error)
	ListSessionIDs(ctx context.Context, scope string, limit int) ([]string, int, error)
	LoadSettings(ctx context.Context) (store.Settings, bool, error)
	NoteCwd(ctx context.Context, dir string, now time.Time) error
	Notify(ctx context.Context, what string) error
	PendingCards(ctx context.Context) ([]*store.Card, error)
	PendingQuestions(ctx context.Context, sid string) ([]*store.Question, error)
	QueuedTurns(ctx context.Context, sid string) ([]string, error)
	ReleaseLease(ctx context.Context, sid string, owner string) error
	RemoteAsks(ctx context.Context) ([]*store.RemoteAsk, error)
	RequeueTurn(ctx context.Context, sid string, turnID string) error
	ResetLoop(ctx context.Context, sid string) error
	SaveSession(ctx context.Context, sess *store.Session) error
	SaveSubscription(ctx context.Context, sub *store.Subscription) error
	SessionExtras(ctx context.Context, ids []string) ([]store.Extras, error)
	SetSessionFields(ctx context.Context, id string, kv map[string]string) error
	SetTurnQuestion(ctx context.Context, id string, questionID string) error
	SetLastDigest(ctx context.Context, sub *store.Subscription, at time.Time) error
	SetOnce(ctx context.Context, name string, ttl time.Duration) (bool, error)
	SubscriptionsOf(ctx context.Context, sid string) ([]*store.Subscription, error)
	TakeLoop(ctx context.Context, sid string, limit int) (taken bool, n int, err error)
	TaskOutput(ctx context.Context, id string) ([]string, error)
	Tasks(ctx context.Context, sid string) ([]*store.Task, error)
	UnlockState(ctx context.Context, sid string) (map[string]string, []*store.Pairing, error)
}

// actionStore is what the tool calls and the lookups every action shares
// (tool.go, sessions.go) need besides the records: the call's
// one-round-trip load, the subscriptions of every session, a session by
// reference.
type actionStore interface {
	AllScopeSubscriptions(ctx context.Context) ([]*store.Subscription, error)
	LoadCall(ctx context.Context, caller string, ref string) (*store.Call, error)
	ResolveSession(ctx context.Context, ref string) (sess *store.Session, matches int, err error)
}

// queueStore is what the turn queue (queue.go) needs besides the records:
// the prompt's push, the caller's wait marked, a 4-at-work slot given back,
// the count of a paired relay's sessions at work, a message by id or prefix.
type queueStore interface {
	PeerBusyCount(ctx context.Context, orchestrator string) (int, error)
	QueueTurn(ctx context.Context, t *store.Turn, o store.QueueOpts) (*store.Queued, error)
	ResolveTurnID(ctx context.Context, idOrPrefix string) (string, int, error)
	SetWaiting(ctx context.Context, turn string, ttl time.Duration) error
	Unreserve(ctx context.Context, orchestrator string, sid string) error
}

// steerStore is what the steering actions (steer.go) need besides the
// records: a question by id or prefix and its answer, a turn's stop
// requested, a session archived.
type steerStore interface {
	AnswerQuestion(ctx context.Context, id string, answer string, by string) (*store.Question, bool, error)
	ArchiveSession(ctx context.Context, id string, now time.Time) error
	RequestTurnStop(ctx context.Context, id string) error
	ResolveQuestionID(ctx context.Context, idOrPrefix string) (string, int, error)
}

// groupStore is what the session groups (groups.go) need.
type groupStore interface {
	DeleteGroup(ctx context.Context, gid string) error
	GroupMembers(ctx context.Context, gid string) ([]string, error)
	GroupOrder(ctx context.Context) ([]string, error)
	Groups(ctx context.Context) ([]*store.Group, error)
	SaveGroup(ctx context.Context, g *store.Group) error
	SetGroupOrder(ctx context.Context, ids []string) error
	SetGroupMember(ctx context.Context, gid string, sid string, member bool) error
}

// createStore is what create_session (create.go) needs besides the records:
// a place among the sessions at work, reserved under the limits.
type createStore interface {
	ReserveUnder(ctx context.Context, orchestrator string, sid string, limit int, peerLimit int) error
}

// tokenStore is what the bearer tokens (tokens.go) need: session, turn
// and peer tokens.
type tokenStore interface {
	AddPeerToken(ctx context.Context, tok string, t store.PeerToken) error
	AddTurnToken(ctx context.Context, sid string, tok string, ttl time.Duration) error
	BindPeerToken(ctx context.Context, tok string, relay string) (string, error)
	DropTurnToken(ctx context.Context, sid string, tok string) error
	PeerTokenRelay(ctx context.Context, tok string) (string, error)
	PeerTokenValid(ctx context.Context, tok string) (bool, error)
	PeerTokenScope(ctx context.Context, tok string) (string, error)
	PeerTokens(ctx context.Context) ([]store.PeerTokenInfo, error)
	RevokePeerToken(ctx context.Context, id string) (bool, error)
	RotateSessionToken(ctx context.Context, sid string, tok string) (bool, error)
	SessionByToken(ctx context.Context, token string) (string, error)
	TouchPeerToken(ctx context.Context, tok string, now time.Time) error
}

// mirrorStore is what the mirrors of remote subscriptions (mirrors.go)
// need: a watcher's mirrors, live and ended.
type mirrorStore interface {
	EndedMirrors(ctx context.Context, watcher string, since time.Time) ([]*store.Subscription, error)
	WatcherMirrors(ctx context.Context, watcher string) ([]*store.Subscription, error)
}

// readStore is what the reads (reads.go) need besides the records: the
// folders used lately, a provider's usage.
type readStore interface {
	RecentCwds(ctx context.Context, n int) ([]string, error)
	Usage(ctx context.Context, provider string) (map[string]int64, error)
}

// drainStore is what the drain (turns.go, turntoken.go, drainer.go,
// stacks.go) needs: the lease, the fenced turn writes and questions.
type drainStore interface {
	AppendMessage(ctx context.Context, sid string, m *store.Message) error
	SetAgentSession(ctx context.Context, sid string, provider string, id string) error
	APIURL(ctx context.Context) (string, error)
	AcquireLease(ctx context.Context, sid string, owner string, ttl time.Duration) (bool, error)
	EndTurn(ctx context.Context, e *store.TurnEnd) (*store.TurnEnded, error)
	PopTurnBy(ctx context.Context, sid string, orchestrator string, now time.Time, drainer string) (string, error)
	RenewLease(ctx context.Context, sid string, owner string, ttl time.Duration) (bool, error)
	RenewTurnToken(ctx context.Context, tok string, ttl time.Duration) (bool, error)
	RequeueTurnBy(ctx context.Context, sid string, turnID string, fence string) error
	SaveQuestion(ctx context.Context, q *store.Question) error
	SetDrainID(ctx context.Context, sid string, id string) error
	SetTurnPartial(ctx context.Context, sid string, id string, fence string, text string, at time.Time) error
	StartDrain(ctx context.Context, sid string, owner string, ttl time.Duration, now time.Time, history int) (*store.Drain, error)
}

// deliveryStore is what delivery (pipeline.go, events.go, notify.go) needs:
// fan-out, hold, release, buffer, flush and summary.
type deliveryStore interface {
	AddWake(ctx context.Context, watcher string, now time.Time) error
	AllSubscriptions(ctx context.Context) ([]*store.Subscription, error)
	AppendEvent(ctx context.Context, ev *store.Event) (bool, error)
	AppendSubEvent(ctx context.Context, sub string, ev *store.Event, keep int64, ttl time.Duration) error
	BufferGroup(ctx context.Context, watcher string, g store.Batch, windowEnd time.Time) (bool, time.Time, error)
	HoldEchoIfWaiting(ctx context.Context, turn string, g store.Batch, watcher string) (string, error)
	HoldEvent(ctx context.Context, sub string, ev *store.Event, due time.Time) (time.Time, bool, error)
	HoldForSummary(ctx context.Context, watcher string, gs []store.Batch, at time.Time) (bool, time.Time, error)
	MarkDelivered(ctx context.Context, watcher string, eventID string) (bool, error)
	SeenEndWaiting(ctx context.Context, turn string, seen bool) (map[string][]store.Batch, error)
	SummaryDue(ctx context.Context, watcher string) (time.Time, error)
	TakeBuffer(ctx context.Context, watcher string, window time.Time) ([]store.Batch, error)
	TakeHeld(ctx context.Context, sub string, now time.Time) ([]store.Event, time.Time, error)
	TakeSummary(ctx context.Context, watcher string) ([]store.Batch, error)
	Wakes(ctx context.Context, watcher string, now time.Time) (int, error)
}

// subscriptionStore is what the subscriptions (subscribe.go) need besides
// the records: adding one under the limit, a watcher's active and ended
// ones, moving held events along.
type subscriptionStore interface {
	AddSubscription(ctx context.Context, sub *store.Subscription, limit int) error
	EndedSubscriptions(ctx context.Context, watcher string, since time.Time) ([]*store.Subscription, error)
	MoveHeld(ctx context.Context, from string, to string) (time.Time, error)
	WatcherSubscriptions(ctx context.Context, watcher string) ([]*store.Subscription, error)
}

// askStore is what the asks (asks.go) need besides the records: adding
// one under the limits, counting, listing and closing them.
type askStore interface {
	AddAsk(ctx context.Context, a *store.Ask, askerLimit int, sessionLimit int) error
	AsksBy(ctx context.Context, asker string, since time.Time) ([]*store.Ask, error)
	CloseAsk(ctx context.Context, a *store.Ask) (bool, error)
	OpenAskCounts(ctx context.Context, asker string, sid string) (int, int, error)
	OpenAsks(ctx context.Context) ([]*store.Ask, error)
}

// cardStore is what the approval cards (cards.go) need besides the
// records: saving a card, reading its decision, setting the flags an
// allowed card grants.
type cardStore interface {
	GetCard(ctx context.Context, id string) (*store.Card, error)
	SaveCard(ctx context.Context, c *store.Card) error
	SetFlag(ctx context.Context, sid string, name string) error
}

// taskStore is what the tasks (tasks.go) need besides the records: saving
// a task, its output and when that output goes.
// mcpTaskStore is what MCP Tasks need (mcptask.go, mcptask_orphan.go, R24.1).
type mcpTaskStore interface {
	CreateMCPTask(ctx context.Context, t *store.MCPTask) error
	GetMCPTask(ctx context.Context, id string) (*store.MCPTask, error)
	UpdateMCPTask(ctx context.Context, id string, c store.MCPTaskChange, now time.Time) (bool, error)
	ProcSeen(ctx context.Context, id string) (time.Time, error) // a task's process (mcptask_orphan.go)
}

type taskStore interface {
	AppendTaskOutput(ctx context.Context, id string, lines ...string) error
	ExpireTaskOutput(ctx context.Context, id string, keep time.Duration) error
	SaveTask(ctx context.Context, t *store.Task) error
}

// updateStore is what update_session (update.go) needs besides the
// records: starting a fresh agent conversation after a move (R17.2).
type updateStore interface {
	ClearAgentSession(ctx context.Context, sid string) error
}

// usageStore is what the usage subsystem (usage.go, caps.go) needs: the
// activity line of a call, a provider's pause and monthly usage, the model
// a turn asked for.
type usageStore interface {
	AddMonthUsage(ctx context.Context, provider string, month string, tokens int64, microUSD int64) error
	AppendActivity(ctx context.Context, sid string, m *store.Message) error
	MonthUsage(ctx context.Context, provider string, month string) (tokens int64, microUSD int64, err error)
	SetActivityOutcome(ctx context.Context, sid string, m *store.Message, outcome string) (bool, error)
	SetTurnModelAsked(ctx context.Context, id string, model string) error
	SetUsagePaused(ctx context.Context, provider string, reason string, at time.Time) error
	UsagePaused(ctx context.Context, provider string) (string, time.Time, error)
}

// scheduleStore is what the schedules (schedule.go) need.
type scheduleStore interface {
	ActiveSchedules(ctx context.Context) ([]*store.Schedule, error)
	AddSchedule(ctx context.Context, sc *store.Schedule, intoLimit int, byLimit int) error
	EndedSchedules(ctx context.Context, sid string, since time.Time) ([]*store.Schedule, error)
	GetSchedule(ctx context.Context, id string) (*store.Schedule, error)
	SaveSchedule(ctx context.Context, sc *store.Schedule) error
	SchedulesBy(ctx context.Context, sid string) ([]*store.Schedule, error)
	SchedulesInto(ctx context.Context, sid string) ([]*store.Schedule, error)
}

// peerStore is what the paired relays' side (peer.go, peercheck.go,
// peerpoll.go, peerserve.go, peertokens.go, pairing.go, remote.go) needs:
// pairings, links, remote asks, the poller's locks.
type peerStore interface {
	SaveLiveSubscription(ctx context.Context, sub *store.Subscription) (bool, error)
	AddPairing(ctx context.Context, p *store.Pairing) error
	AddPeerPrompted(ctx context.Context, relay, sid string) error
	DeletePairing(ctx context.Context, name string) (bool, error)
	DeleteRemoteAsk(ctx context.Context, relay, id string) (bool, error)
	DropLink(ctx context.Context, name string) error
	Instance(ctx context.Context) (string, error)
	Links(ctx context.Context) (map[string]store.Link, error)
	PairingCount(ctx context.Context) (int64, error)
	Pairings(ctx context.Context) ([]*store.Pairing, error)
	PeerPrompted(ctx context.Context, relay string) ([]string, error)
	ReleaseLock(ctx context.Context, name string) error
	RemoteSubscriptions(ctx context.Context) ([]*store.Subscription, error)
	SavePairing(ctx context.Context, p *store.Pairing) error
	SaveRemoteAsk(ctx context.Context, a *store.RemoteAsk) error
	SetLink(ctx context.Context, name string, online bool, at time.Time, reason string) (bool, error)
	SubEvents(ctx context.Context, sub string, after string, max int64) ([]store.Event, string, error)
	TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error)
	Unlock(ctx context.Context, sid string, byOwner bool, names ...string) error
	Unlocked(ctx context.Context, sid string) (map[string]bool, error)
}

// ownerStore is what the owner's operations (owner.go) need besides the
// records.
type ownerStore interface {
	AppendActivity(ctx context.Context, sid string, m *store.Message) error // an external session's kept owner message (R24.7)
	BusyKey(orchestrator string) string
	DeleteSession(ctx context.Context, sid string, busyKeys ...string) error
	DrainFlags(ctx context.Context) (map[string]string, error)
	LeaseHolder(ctx context.Context, sid string) (string, error)
	PeerBusyKey(orchestrator string) string
	SaveSettings(ctx context.Context, st store.Settings) error
	SessionQuiet(ctx context.Context, sid string) (bool, error)
}

// killStore is what Kill session (kill.go) needs besides the records:
// the answers of the relay's processes to a kill request, and which live.
type killStore interface {
	AckKill(ctx context.Context, req, proc string, killed bool) error
	KillAcks(ctx context.Context, req string) (map[string]bool, error)
	LiveProcs(ctx context.Context, since time.Time) ([]store.Proc, error)
}

// lifeStore is what starting the relay (relay.go, jobs.go) needs: stored
// settings, token upgrades, the notification subscription.
type lifeStore interface {
	InitSettings(ctx context.Context, st store.Settings) (store.Settings, error)
	SubscribeNotify(ctx context.Context) *redis.PubSub
	UpgradeTokens(ctx context.Context) (int, error)
}
