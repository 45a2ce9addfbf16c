// Package domain is the domain: one Relay service with a method per action of
// relay_tool, the caller, the rules (permissions, cards, caps, loop
// protection, hops), the result envelope and error codes, and the running of
// turns through providers. It knows nothing of HTTP, MCP or asynq.
package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/clock"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/repos"
	"github.com/oar/relay/store"
)

// Enqueuer starts the job that runs a session's next turn.
type Enqueuer interface {
	EnqueueDrain(ctx context.Context, session, taskID string) error
	// Enqueue enqueues an event-delivery job (id optional for uniqueness, at optional = now).
	Enqueue(ctx context.Context, typ string, payload any, id string, at time.Time) error
	// DrainTaskExists reports whether a drain task with this id is still pending, scheduled, retrying or active.
	DrainTaskExists(ctx context.Context, taskID string) (bool, error)
	// DrainTaskWaiting reports whether it waits to run (pending, scheduled, retrying).
	DrainTaskWaiting(ctx context.Context, taskID string) (bool, error)
}

// Metrics receives the domain's counts. A nil Metrics counts nothing.
type Metrics interface {
	ToolCall(action, code string, d time.Duration)
	TurnStarted(provider string)
	TurnFinished(provider, status string, d time.Duration)
	CardDecided(decision string)
	Event(kind string)
	Delivery(kind string)
	NotifyFailed() // a notification of the console was not sent
}

// Options configures a Relay.
type Options struct {
	Name       string
	Version    string
	BaseURL    string // http://host:port of the API ("" in a worker-only process)
	Folders    []string
	DefaultCwd string
	Settings   config.Settings // initial settings (stored on first start)
	Timing     config.Timing
	Limits     config.Limits
	// Clock is the rules' clock (package clock: what it drives and what it
	// does not); default the wall clock. Tests run a Scaled or a Sim one.
	Clock clock.Clock
	// Timers is the clock of the durations of work: how long a call waits
	// for a reply or a card, a turn's max_turn_seconds, how long a process
	// trusts the tokens it cached (tokens.go); default the wall clock, also
	// when Clock is a Scaled one. The domain's tests run a Sim to step
	// through a timeout.
	Timers   clock.Clock
	Logger   *slog.Logger
	Metrics  Metrics
	WorkerID string
	// MaxWaitCap, when set, caps the longest wait per call below the settings (tests).
	MaxWaitCap time.Duration
	// Caps are the providers' monthly spending caps by provider id (R7.8).
	Caps map[string]Cap
	// Traits say per provider id how its sessions take update_session's
	// Claude settings (R7.10); a provider not named has none.
	Traits map[string]SessionTraits
	// DirectDrains is how many drains a process that runs a worker may start
	// itself for prompts whose caller waits (drainer.go); 0: none.
	DirectDrains int
	// Repos keeps repository sessions' clones and worktrees (R24.4); nil:
	// none (a repository session is refused).
	Repos *repos.Manager
	// Peers sends the peer protocol's requests to paired relays (package
	// peer's Client); nil: none can be reached (their requests fail OFFLINE).
	Peers PeerClient
	// Notices receives the owner notifications (R23.10, notify.go) besides
	// the console's live stream: the webhooks; nil: none.
	Notices NoticeSink
}

// Relay is the domain service: the lookups every action shares
// (sessions.go), the owner's operations (owner.go) and the doors of its
// subsystems, each a type of its own that reaches the rest through a
// small host interface (docs/ARCHITECTURE.md, "Subsystems"); the tool
// actions are the subsystems'.
type Relay struct {
	st      Store
	enq     Enqueuer
	opts    Options
	clk     clock.Clock      // the rules' clock (opts.Clock)
	now     func() time.Time // clk.Now in UTC: records and results are in UTC
	log     *slog.Logger
	met     Metrics
	hub     *hub
	warm    *warmGoroutines    // tool calls and drains started here run on kept goroutines (stacks.go)
	handler map[string]handler // the actions' handlers (handlers), built once
	bg      sync.WaitGroup     // goroutines of Start: notification listener, cache watcher
	// life ends when the relay stops (Start's context): the calls of MCP
	// tasks running here end their waits then (mcptask.go); taskRuns counts them.
	life     context.Context
	taskRuns sync.WaitGroup
	setKept  cached[store.Settings] // the owner's settings (settings)

	// The subsystems.
	turns     *turnQueue     // queueing a turn and waiting for it, the wait action (queue.go)
	models    *models        // the providers as the actions check them: models, efforts (models.go)
	sends     *sends         // send (send.go)
	steer     *steering      // answer_question, stop, archive (steer.go)
	pipeline  *pipeline      // delivery: fan-out, hold, release, flush, summary (pipeline.go)
	drainer   *drainer       // the drain: turns, leases, drains started here (turns.go, drainer.go)
	schedules *schedules     // schedules (schedule.go)
	subs      *subscriptions // subscriptions (subscribe.go)
	asks      *asks          // asks to the owner (asks.go)
	cards     *cards         // approval cards and loop protection (cards.go)
	groups    *groups        // session groups (groups.go)
	creates   *creates       // create_session and the folders rule (create.go)
	reads     *reads         // list_relays, relay_info, usage, list_sessions, read_session, the owner's views (reads.go)
	tasks     *tasks         // a turn's tasks and their output (tasks.go)
	updates   *updates       // update_session and the Claude settings a turn takes (update.go)
	usage     *usage         // usage, caps, availability, the activity line (usage.go, caps.go)
	tokens    *tokens        // bearer tokens and their caches (tokens.go)
	link      *peerLink      // the paired relays: pairing, link, poller (peer.go, peerpoll.go)
	remote    *remote        // calls to paired relays and their mirrors (remote.go, mirrors.go)
}

// New builds a Relay.
func New(st Store, enq Enqueuer, provs []provider.Provider, opts Options) *Relay {
	opts = opts.withDefaults()
	clk := opts.Clock
	r := &Relay{st: st, enq: enq, opts: opts, clk: clk, now: func() time.Time { return clk.Now().UTC() }, log: opts.Logger, met: opts.Metrics,
		hub:  newHub(),
		warm: newWarmGoroutines(keptGoroutines, clock.Real{})}
	r.models = newModels(&r.opts, provs)
	history := 0 // the last messages a drain reads with its turn (historyRead when a provider uses them)
	if slices.ContainsFunc(provs, func(p provider.Provider) bool { return p.Info().WantsHistory }) {
		history = historyRead
	}
	r.pipeline = &pipeline{st: st, enq: enq, clk: clk, now: r.now, log: r.log, met: r.met, opts: &r.opts, relay: r}
	r.link = &peerLink{st: st, peers: opts.Peers, log: r.log, met: r.met, opts: &r.opts, now: r.now, pipeline: r.pipeline, relay: r,
		linkOnline: map[string]time.Time{}, pollWake: make(chan struct{}, 1)}
	r.setKept.ttl = settingsTTL
	r.tokens = newTokens(st, r.now, r.log, &r.opts)
	r.cards = &cards{st: st, now: r.now, log: r.log, met: r.met, opts: &r.opts, hub: r.hub, relay: r}
	r.groups = &groups{st: st, now: r.now, opts: &r.opts, relay: r}
	r.tasks = &tasks{st: st, now: r.now, log: r.log, opts: &r.opts, pipeline: r.pipeline, hub: r.hub, relay: r}
	r.usage = &usage{st: st, now: r.now, log: r.log, opts: &r.opts, models: r.models, relay: r}
	r.reads = &reads{st: st, log: r.log, opts: &r.opts, groups: r.groups, usage: r.usage, tasks: r.tasks, models: r.models, relay: r}
	r.updates = &updates{st: st, now: r.now, opts: &r.opts, groups: r.groups, cards: r.cards, models: r.models, relay: r}
	r.drainer = &drainer{st: st, enq: enq, log: r.log, met: r.met, opts: &r.opts, now: r.now, pipeline: r.pipeline, hub: r.hub, warm: r.warm, tokens: r.tokens,
		models: r.models, drainHistory: history, tasks: r.tasks, usage: r.usage, updates: r.updates, relay: r,
		running: map[string]context.CancelCauseFunc{}, claims: map[string]bool{}, endingNow: map[string]bool{}}
	r.turns = &turnQueue{st: st, enq: enq, log: r.log, opts: &r.opts, now: r.now, hub: r.hub, pipeline: r.pipeline, drainer: r.drainer, cards: r.cards, reads: r.reads, relay: r}
	r.schedules = &schedules{st: st, now: r.now, log: r.log, met: r.met, opts: &r.opts, pipeline: r.pipeline, cards: r.cards, turns: r.turns, relay: r}
	r.subs = &subscriptions{st: st, now: r.now, opts: &r.opts, pipeline: r.pipeline, cards: r.cards, relay: r}
	r.asks = &asks{st: st, now: r.now, opts: &r.opts, pipeline: r.pipeline, cards: r.cards, relay: r}
	r.remote = &remote{st: st, now: r.now, log: r.log, opts: &r.opts, link: r.link, cards: r.cards, subs: r.subs, turns: r.turns, relay: r}
	r.sends = &sends{st: st, log: r.log, opts: &r.opts, turns: r.turns, cards: r.cards, usage: r.usage, models: r.models, relay: r}
	r.steer = &steering{st: st, now: r.now, opts: &r.opts, cards: r.cards, subs: r.subs, schedules: r.schedules, asks: r.asks, relay: r}
	r.creates = &creates{st: st, now: r.now, log: r.log, opts: &r.opts, cards: r.cards, groups: r.groups, usage: r.usage, remote: r.remote, turns: r.turns, models: r.models,
		foldKept: cached[[]string]{ttl: folderRecheck}}
	r.handler = r.handlers()
	if opts.DirectDrains > 0 {
		r.drainer.direct = make(chan struct{}, opts.DirectDrains)
	}
	// The external session kind (R17.7) has a provider record so settings
	// and look-ups work, but it is listed nowhere and runs no turns.
	r.models.providers[ProviderExternal] = externalProvider{}
	return r
}

// withDefaults fills in what New's caller left out: the real clock and
// timers, the default logger, a fresh worker id, no paired relays.
func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Timers == nil {
		o.Timers = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.WorkerID == "" {
		o.WorkerID = store.NewID(8)
	}
	if o.Peers == nil {
		o.Peers = noPeers{}
	}
	return o
}

// newModels holds the providers by id, read-only after New, and their ids
// in config order.
func newModels(opts *Options, provs []provider.Provider) *models {
	m := &models{opts: opts, providers: map[string]provider.Provider{}}
	for _, p := range provs {
		id := p.Info().ID
		m.providers[id] = p
		m.order = append(m.order, id)
	}
	return m
}

// SetBaseURL sets the API's URL once the listener is bound (serve) .
func (r *Relay) SetBaseURL(u string) { r.opts.BaseURL = u }

// PublicURL is the relay's public URL, as agents and MCP clients are given
// it ("" in a worker-only process): the console's MCP client settings
// (R23.5).
func (r *Relay) PublicURL() string { return r.opts.BaseURL }

// WorkerID names this process in leases and logs.
func (r *Relay) WorkerID() string { return r.opts.WorkerID }

// Name is this relay's name.
func (r *Relay) Name() string { return r.opts.Name }

// Start initialises stored settings and listens for notifications until ctx ends.
func (r *Relay) Start(ctx context.Context) error {
	if err := r.initStored(ctx); err != nil {
		return err
	}
	r.life = ctx
	ready := make(chan struct{})
	r.hub.handle(killPrefix, func(rest string) { r.onKill(ctx, rest) }) // R23.6: a kill asked in any process
	changed, unsub := r.hub.sub("settings")
	revoked, unsubTok := r.hub.sub("tokens")
	r.bg.Add(2)
	go func() {
		defer r.bg.Done()
		defer unsub()
		defer unsubTok()
		r.dropOnChange(ctx, changed, revoked)
	}()
	go func() {
		defer r.bg.Done()
		r.hub.listen(ctx, r.st, ready, r.log)
	}()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		r.link.peerLoop(ctx) // paired relays: remote subscriptions, asks, link state
	}()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-time.After(notifyReadyTimeout):
		return errors.New("subscribe to notifications: no answer from Redis")
	}
	return nil
}

// initStored readies what is stored before anything is served: tokens a
// relay before stored in plain text become hashes, once (R18.19), and the
// owner's settings are set from the config where none are stored yet.
func (r *Relay) initStored(ctx context.Context) error {
	if n, err := r.st.UpgradeTokens(ctx); err != nil {
		return fmt.Errorf("upgrade stored tokens to hashes: %w", err)
	} else if n > 0 {
		r.log.Info("stored tokens upgraded: only their SHA-256 hashes are kept now", "tokens", n)
	}
	s := r.opts.Settings
	_, err := r.st.InitSettings(ctx, store.Settings{AgentSessions: s.AgentSessions,
		AcceptAgentPrompts: s.AcceptAgentPrompts, MaxWaitSeconds: s.MaxWaitSeconds,
		QuietTaskMinutes: s.QuietTaskMinutes, MaxTurnSeconds: s.MaxTurnSeconds})
	return err
}

// dropOnChange drops this process's copy of the settings or of the tokens
// whenever a process announces they changed, until ctx ends.
func (r *Relay) dropOnChange(ctx context.Context, changed, revoked <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			r.setKept.drop()
		case <-revoked: // also fired after a lost notification subscription
			r.tokens.dropTokens()
		}
	}
}

// Wait returns when the goroutines Start began have ended (after Start's ctx
// was cancelled) and so have the drains started here and the kept goroutines
// (stacks.go; no more start once Wait began; it waits for them at most
// directWaitMax): the process shuts down with nothing of the relay running.
func (r *Relay) Wait() {
	r.bg.Wait()
	r.drainer.mu.Lock()
	r.drainer.stopping = true // no drain starts here any more (startHere)
	r.drainer.mu.Unlock()
	r.warm.stop()
	done := make(chan struct{})
	go func() { r.taskRuns.Wait(); r.drainer.directWG.Wait(); r.warm.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(directWaitMax):
		// Like asynq's own shutdown timeout: a drain still writing its
		// outcome (Redis away) is left; its flag and lease recover it.
		r.log.Warn("drains or tool calls started here still running at shutdown; leaving them", "waited", directWaitMax)
	}
}

// keptGoroutines is how many goroutines a process keeps for tool calls and
// drains started here (stacks.go): about the calls it serves at once.
const keptGoroutines = 128

// directWaitMax bounds how long Wait waits for the drains started here.
const directWaitMax = 10 * time.Second

// settings reads the owner's settings (shared by every process through Redis).
// They are cached for settingsTTL; a change anywhere is announced on the
// notification channel ("settings") and drops every process's copy at once.
func (r *Relay) settings(ctx context.Context) (store.Settings, error) {
	if st, ok := r.setKept.get(); ok {
		return st, nil
	}
	st, ok, err := r.st.LoadSettings(ctx)
	if err != nil {
		return st, fmt.Errorf("load settings: %w", err)
	}
	if !ok {
		s := r.opts.Settings
		st = store.Settings{AgentSessions: s.AgentSessions, AcceptAgentPrompts: s.AcceptAgentPrompts,
			MaxWaitSeconds: s.MaxWaitSeconds, QuietTaskMinutes: s.QuietTaskMinutes, MaxTurnSeconds: s.MaxTurnSeconds}
	}
	r.setKept.keep(st)
	return st, nil
}

const settingsTTL = 2 * time.Second

// hub fans pub/sub notifications out to the waiters of this process.
type hub struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	// vals are what fireWith handed the waiters of a key, kept while any
	// waits on it.
	vals map[string]any
	// handlers are called (on a goroutine of their own) with the rest of
	// each notification that starts with their prefix ("kill:", R23.6).
	handlers map[string]func(rest string)
}

// handle calls fn with the rest of every notification starting with prefix.
func (h *hub) handle(prefix string, fn func(rest string)) {
	h.mu.Lock()
	if h.handlers == nil {
		h.handlers = map[string]func(string){}
	}
	h.handlers[prefix] = fn
	h.mu.Unlock()
}

func newHub() *hub {
	return &hub{waiters: map[string]map[chan struct{}]struct{}{}, vals: map[string]any{}}
}

// sub registers interest in key; the channel receives (without blocking) on each fire.
func (h *hub) sub(key string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.waiters[key] == nil {
		h.waiters[key] = map[chan struct{}]struct{}{}
	}
	h.waiters[key][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.waiters[key], ch)
		if len(h.waiters[key]) == 0 {
			delete(h.waiters, key)
			delete(h.vals, key)
		}
		h.mu.Unlock()
	}
}

func (h *hub) fire(key string) {
	h.mu.Lock()
	for ch := range h.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for p, fn := range h.handlers {
		if rest, ok := strings.CutPrefix(key, p); ok {
			go fn(rest)
		}
	}
	h.mu.Unlock()
}

// fireWith is fire handing v to the key's waiters (val), when any waits.
func (h *hub) fireWith(key string, v any) {
	h.mu.Lock()
	if len(h.waiters[key]) > 0 {
		h.vals[key] = v
	}
	h.mu.Unlock()
	h.fire(key)
}

// val is what fireWith last handed key's waiters (nil: nothing).
func (h *hub) val(key string) any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vals[key]
}

// fireAll wakes every waiter (after a lost subscription, so each re-checks).
func (h *hub) fireAll() {
	h.mu.Lock()
	for _, m := range h.waiters {
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	h.mu.Unlock()
}

func (h *hub) listen(ctx context.Context, st lifeStore, ready chan struct{}, log *slog.Logger) {
	once := sync.Once{}
	for ctx.Err() == nil {
		ps := st.SubscribeNotify(ctx)
		if _, err := ps.Receive(ctx); err != nil {
			_ = ps.Close()
			if ctx.Err() == nil {
				log.Warn("notification subscription failed; retrying", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(notifyRetry):
				}
			}
			continue
		}
		once.Do(func() { close(ready) })
		h.fireAll()
		h.forward(ctx, ps.Channel(redis.WithChannelHealthCheckInterval(notifyHealthEvery)))
		_ = ps.Close()
	}
}

// forward hands each notification of ch to its handlers until ctx ends or
// ch closes (the subscription was lost).
func (h *hub) forward(ctx context.Context, ch <-chan *redis.Message) {
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			h.fire(m.Payload)
		}
	}
}
