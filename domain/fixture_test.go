package domain

// The domain test fixture: one Relay on a store of its own (REDIS_URL when
// set, else the embedded server — the owner's default), a recording
// enqueuer that runs jobs only when the test says so, the scripted
// provider, and a simulated clock. The rule suites here drive the domain
// through CallTool and the owner methods without HTTP, MCP or a worker
// process; relaytest keeps the end-to-end tests.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
	"github.com/oar/relay/internal/testredis"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// fixture is one test's relay.
type fixture struct {
	t   testing.TB
	ctx context.Context
	r   *Relay
	st  *store.Store
	clk *clock.Sim
	// work is the clock of the durations of work (fixtureOptions.work; nil:
	// the wall clock): waits, cards, turn limits, the scripted agent's sleeps.
	work *clock.Sim
	enq  *recordingEnqueuer
}

// fixtureOptions changes the relay a fixture builds.
type fixtureOptions struct {
	settings func(*config.Settings)
	limits   func(*config.Limits)
	timing   func(*config.Timing)
	peers    PeerClient // the paired relays' client (nil: none can be reached)
	metrics  Metrics    // the relay's counts (nil: none)
	start    time.Time  // the simulated clock's start (zero: 2026-12-02 09:00 UTC)

	name       string                                            // the relay's name ("": desk)
	baseURL    string                                            // Options.BaseURL
	scripted   []provider.Info                                   // the scripted providers (nil: one, the default)
	extra      func(*config.Config) ([]provider.Provider, error) // more providers after them, built from the relay's config (a scripted one's Close is the fixture's)
	caps       map[string]Cap                                    // Options.Caps
	traits     map[string]SessionTraits                          // Options.Traits
	maxWaitCap time.Duration                                     // Options.MaxWaitCap (0: none)
	// work runs the durations of work (Options.Timers, the scripted agent's
	// sleeps) on a simulated clock the test moves with pass; false: on the
	// wall clock, as a relay does.
	work bool
}

// config is the default configuration as fo's settings, limits and timing
// change it.
func (fo fixtureOptions) config() config.Config {
	cfg := config.Default()
	if fo.settings != nil {
		fo.settings(&cfg.Settings)
	}
	if fo.limits != nil {
		fo.limits(&cfg.Limits)
	}
	if fo.timing != nil {
		fo.timing(&cfg.Timing)
	}
	return cfg
}

// newFixture builds and starts a relay for t; everything ends with the test.
func newFixture(t testing.TB, fo fixtureOptions) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rdb, prefix := fixtureRedis(t)
	cfg := fo.config()
	if fo.start.IsZero() {
		fo.start = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	}
	f := &fixture{t: t, ctx: ctx, st: store.New(rdb, prefix),
		clk: clock.NewSim(fo.start), enq: &recordingEnqueuer{added: make(chan struct{}, 1)}}
	if fo.name == "" {
		fo.name = "desk"
	}
	if fo.scripted == nil {
		fo.scripted = []provider.Info{{}}
	}
	var timers clock.Clock = clock.Real{}
	if fo.work {
		f.work = clock.NewSim(fo.start)
		timers = f.work
	}
	var provs []provider.Provider
	var scripted []*provider.Scripted
	for _, in := range fo.scripted {
		p := provider.NewScripted(in)
		p.UseClock(timers)
		provs, scripted = append(provs, p), append(scripted, p)
	}
	closeScripted := func() {
		for _, p := range scripted {
			p.Close()
		}
	}
	if fo.extra != nil {
		more, err := fo.extra(&cfg)
		for _, p := range more {
			if sp, ok := p.(*provider.Scripted); ok {
				sp.UseClock(timers)
				scripted = append(scripted, sp)
			}
		}
		if err != nil {
			cancel()
			closeScripted()
			t.Fatalf("providers: %v", err)
		}
		provs = append(provs, more...)
	}
	f.r = New(f.st, f.enq, provs, Options{
		Name: fo.name, Version: "test", BaseURL: fo.baseURL, Folders: []string{t.TempDir()},
		Settings: cfg.Settings, Timing: cfg.Timing, Limits: cfg.Limits, Clock: f.clk, Timers: timers,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Peers: fo.peers, Metrics: fo.metrics,
		Caps: fo.caps, Traits: fo.traits, MaxWaitCap: fo.maxWaitCap,
	})
	if err := f.r.Start(ctx); err != nil {
		cancel()
		closeScripted()
		t.Fatalf("start relay %s: %v", fo.name, err)
	}
	t.Cleanup(func() {
		cancel()
		f.r.Shutdown()
		f.r.Wait() // the listener and the kept goroutines are joined (goleak checks it)
		closeScripted()
	})
	return f
}

// fixtureRedis is the test's Redis and key prefix (testredis): REDIS_URL
// when set (it must answer), else an embedded server in a data directory of
// the test's. CI=true without REDIS_URL fails: CI runs the rules against a
// real Redis.
func fixtureRedis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	prefix := "dt" + store.NewID(6)
	kind, url := testredis.Pick(t, "domain rules")
	if kind != testredis.Real {
		return testredis.OpenEmbedded(t), prefix
	}
	return testredis.Dial(t, url, func(ctx context.Context, rdb redis.UniversalClient) {
		if err := store.DeleteMatching(ctx, rdb, "{"+prefix+"*"); err != nil {
			t.Errorf("clean up %s: %v", prefix, err)
		}
	}), prefix
}

// session creates a session as the owner and returns its id.
func (f *fixture) session(in NewSession) string {
	f.t.Helper()
	m, err := f.r.OwnerCreateSession(f.ctx, in)
	if err != nil {
		f.t.Fatalf("create session %+v: %v", in, err)
	}
	if m.ID == "" {
		f.t.Fatalf("create session %+v: no id in %+v", in, m)
	}
	return m.ID
}

// call runs one relay_tool call as caller and returns the decoded envelope.
func (f *fixture) call(caller string, args map[string]any) map[string]any {
	f.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		f.t.Fatal(err)
	}
	out, _ := f.r.CallTool(f.ctx, caller, raw, nil)
	var env map[string]any
	if err := json.Unmarshal(out, &env); err != nil {
		f.t.Fatalf("envelope %s: %v", out, err)
	}
	return env
}

// ok is call for a call that must succeed: its envelope.
func (f *fixture) ok(caller string, args map[string]any) map[string]any {
	f.t.Helper()
	env := f.call(caller, args)
	if env["ok"] != true {
		f.t.Fatalf("%v: want ok, got %v", args, env)
	}
	return env
}

// agentLine is the first line of a prompt from an agent on this relay (R18.15).
func agentLine(title, model string) string {
	return `[Prompt from an agent on this relay · session "` + title + `" · ` + model + ` · acting for the user]`
}

// messages is the number of messages of a session.
func (f *fixture) messages(sid string) int {
	f.t.Helper()
	n, err := f.st.MessageCount(f.ctx, sid)
	if err != nil {
		f.t.Fatalf("messages of %s: %v", sid, err)
	}
	return n
}

// job is one enqueued job as the recording enqueuer keeps it.
type job struct {
	typ     string
	session string // drain jobs
	payload json.RawMessage
	id      string
	at      time.Time
	seq     int
}

// recordingEnqueuer keeps what the relay enqueues, oldest first; nothing
// runs until the fixture takes a job. Ids are unique while a job is kept, as
// asynq's are. added is signalled (without blocking) after each add, for a
// test that runs jobs as they come (actAuto).
type recordingEnqueuer struct {
	mu    sync.Mutex
	seq   int
	jobs  []job
	added chan struct{}
}

func (e *recordingEnqueuer) add(j job) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j.id != "" {
		for _, o := range e.jobs {
			if o.id == j.id {
				return nil // a job with this id is waiting: like asynq's ErrTaskIDConflict, taken as done
			}
		}
	}
	e.seq++
	j.seq = e.seq
	e.jobs = append(e.jobs, j)
	select {
	case e.added <- struct{}{}:
	default:
	}
	return nil
}

func (e *recordingEnqueuer) EnqueueDrain(_ context.Context, session, taskID string) error {
	return e.add(job{typ: "drain", session: session, id: taskID})
}

func (e *recordingEnqueuer) Enqueue(_ context.Context, typ string, payload any, id string, at time.Time) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("payload of %s: %w", typ, err)
	}
	return e.add(job{typ: typ, payload: b, id: id, at: at})
}

func (e *recordingEnqueuer) find(taskID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, j := range e.jobs {
		if j.id == taskID {
			return true
		}
	}
	return false
}

func (e *recordingEnqueuer) DrainTaskExists(_ context.Context, taskID string) (bool, error) {
	return e.find(taskID), nil
}

func (e *recordingEnqueuer) DrainTaskWaiting(_ context.Context, taskID string) (bool, error) {
	return e.find(taskID), nil
}

// next takes the oldest drain job (drain true) or the oldest other job due
// at or before now.
func (e *recordingEnqueuer) next(drain bool, now time.Time) (job, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, j := range e.jobs {
		if (j.typ == "drain") != drain || !drain && j.at.After(now) {
			continue
		}
		e.jobs = append(e.jobs[:i], e.jobs[i+1:]...)
		return j, true
	}
	return job{}, false
}

// pending lists the kept jobs' types, oldest first.
func (e *recordingEnqueuer) pending() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, j := range e.jobs {
		out = append(out, j.typ)
	}
	return out
}

// agentSessionsOn is a fixtureOptions.settings that turns agent sessions on.
func agentSessionsOn(s *config.Settings) { s.AgentSessions = true }

// prompt queues text for sid as the owner and returns the turn id.
func (f *fixture) prompt(sid, text string) string {
	f.t.Helper()
	m, err := f.r.OwnerMessage(f.ctx, sid, text)
	if err != nil {
		f.t.Fatalf("prompt %s: %v", sid, err)
	}
	return m.MessageID
}

// script is a scripted-provider prompt of steps.
func script(steps ...map[string]any) string {
	b, err := json.Marshal(map[string]any{"script": steps})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// toolResults are the relay_tool envelopes a scripted turn wrote into its reply.
func (f *fixture) toolResults(turnID string) []map[string]any {
	f.t.Helper()
	tr, err := f.r.Turn(f.ctx, turnID)
	if err != nil {
		f.t.Fatalf("turn %s: %v", turnID, err)
	}
	if tr.Status != store.TurnDone {
		f.t.Fatalf("turn %s: status %s (error %q), want done", turnID, tr.Status, tr.Error)
	}
	var out []map[string]any
	for _, l := range strings.Split(tr.Reply, "\n") {
		var m map[string]any
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &m) == nil {
			if _, ok := m["ok"]; ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// run runs what is due: every drain, and every other job due at the clock's
// now, oldest first, until nothing due is left; it returns how many ran.
func (f *fixture) run() int {
	f.t.Helper()
	n := 0
	for ; ; n++ {
		if n > 10000 {
			f.t.Fatalf("jobs keep coming: %v", f.enq.pending())
		}
		if j, ok := f.enq.next(true, time.Time{}); ok {
			if err := f.r.Drain(f.ctx, j.session); err != nil && !errors.Is(err, ErrRetryLater) {
				f.t.Fatalf("drain %s: %v", j.session, err)
			}
			continue
		}
		j, ok := f.enq.next(false, f.clk.Now())
		if !ok {
			return n
		}
		if err := f.r.RunJob(f.ctx, j.typ, j.payload); err != nil {
			f.t.Fatalf("job %s %s: %v", j.typ, j.payload, err)
		}
	}
}

// advance moves the clock on by d and runs what became due on the way, in
// steps of at most a second, so each job runs at its own time.
func (f *fixture) advance(d time.Duration) int {
	f.t.Helper()
	n := 0
	for d > 0 {
		step := min(d, time.Second)
		f.clk.Advance(step)
		d -= step
		n += f.run()
	}
	return n
}

// pass moves the clock of the durations of work (fixtureOptions.work) on by
// d once a timer due then is set: the wait, card, turn limit or scripted
// sleep the test means to end has started (in another goroutine).
func (f *fixture) pass(d time.Duration) {
	f.t.Helper()
	if f.work == nil {
		f.t.Fatal("pass without fixtureOptions.work")
	}
	f.due(f.work.Now().Add(d))
	f.work.Advance(d)
}

// due waits until a timer of the clock of the durations of work is due at t.
func (f *fixture) due(t time.Time) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, actUntilMax)
	defer cancel()
	if err := f.work.WaitDue(ctx, t); err != nil {
		f.t.Fatalf("no timer due at %s within %s (clock at %s); due: %v", t.Format(time.TimeOnly),
			actUntilMax, f.work.Now().Format(time.TimeOnly), f.work.Due())
	}
}

// meanwhile runs fn in its own goroutine (a call that waits, a drain) while
// the test moves the work clock; the func it returns waits until fn has
// returned, failing the test after actUntilMax.
func (f *fixture) meanwhile(what string, fn func()) (done func()) {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		fn()
	}()
	return func() {
		f.t.Helper()
		select {
		case <-ch:
		case <-time.After(actUntilMax):
			f.t.Fatalf("%s: not done within %s", what, actUntilMax)
		}
	}
}

// history is a session's messages of one role ("" all), oldest first.
func (f *fixture) history(sid, role string) []store.Message {
	f.t.Helper()
	all, err := f.st.LastMessages(f.ctx, sid, 1000)
	if err != nil {
		f.t.Fatalf("messages of %s: %v", sid, err)
	}
	var out []store.Message
	for _, m := range all {
		if role == "" || m.Role == role {
			out = append(out, m)
		}
	}
	return out
}

// cmpIgnoreKeys leaves the named keys of maps out of a comparison.
func cmpIgnoreKeys(keys ...string) cmp.Option {
	skip := map[string]bool{}
	for _, k := range keys {
		skip[k] = true
	}
	return cmp.FilterPath(func(p cmp.Path) bool {
		mi, ok := p.Last().(cmp.MapIndex)
		return ok && skip[mi.Key().String()]
	}, cmp.Ignore())
}

// goRun is run on a goroutine of its own, for a turn that will block (on a
// card, a question): the oldest drain is taken before goRun returns, so a
// run the test makes meanwhile cannot take that turn and block in its
// place. The channel closes when the goroutine's run ended.
func (f *fixture) goRun() <-chan struct{} {
	j, ok := f.enq.next(true, time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ok {
			if err := f.r.Drain(f.ctx, j.session); err != nil && !errors.Is(err, ErrRetryLater) {
				f.t.Errorf("drain %s: %v", j.session, err)
				return
			}
		}
		f.run()
	}()
	return done
}

// card waits for sid's pending card while done (the turn's run) is open and
// returns it; nil when the run ended without one, and a failure after 20 s.
// The turn runs on another goroutine; the clock stands still meanwhile.
func (f *fixture) card(sid string, done <-chan struct{}) *store.Card {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		cards, err := f.st.PendingCards(f.ctx)
		if err != nil {
			f.t.Fatalf("pending cards: %v", err)
		}
		for _, c := range cards {
			if c.Session == sid {
				return c
			}
		}
		select {
		case <-done:
			return nil
		case <-time.After(2 * time.Millisecond):
		}
	}
	f.t.Fatalf("no card of %s came", sid)
	return nil
}

// mustCard is card for a turn that must ask one.
func (f *fixture) mustCard(sid string, done <-chan struct{}) *store.Card {
	f.t.Helper()
	c := f.card(sid, done)
	if c == nil {
		f.t.Fatalf("the turn of %s ended without a card", sid)
	}
	return c
}
