package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// ---- helpers shared by the rules and process tests ----

// stepTool is a scripted-provider step that calls relay_tool with args.
func stepTool(args map[string]any) map[string]any { return map[string]any{"tool": args} }

// stepSleep is a scripted-provider step that sleeps.
func stepSleep(ms int) map[string]any { return map[string]any{"sleep_ms": ms} }

// stepReply is a scripted-provider step that appends text to the reply.
func stepReply(s string) map[string]any { return map[string]any{"reply": s} }

// waitEnded waits until a turn has ended and returns it.
func waitEnded(r *Relay, id string, d time.Duration) *store.Turn {
	r.tb.Helper()
	return r.WaitTurn(id, d, store.TurnDone, store.TurnError, store.TurnStopped)
}

// scriptToolEnvs waits for a scripted turn to end done and returns its tool results (want of them).
func scriptToolEnvs(t testing.TB, r *Relay, id string, want int) []map[string]any {
	t.Helper()
	tr := waitEnded(r, id, 60*time.Second)
	if tr.Status != store.TurnDone {
		t.Fatalf("turn %s: status %s (error %q), want done", id, tr.Status, tr.Error)
	}
	res := ToolResults(tr.Reply)
	if len(res) != want {
		t.Fatalf("turn %s: %d tool results, want %d; reply:\n%s", id, len(res), want, tr.Reply)
	}
	return res
}

func mustEnvOK(t testing.TB, env map[string]any) {
	t.Helper()
	if env["ok"] != true {
		t.Fatalf("want ok, got %v", env)
	}
}

// decideCard waits for the session's next card, checks its action and target, and decides it.
func decideCard(t testing.TB, r *Relay, sid, action string, target any, decision string) map[string]any {
	t.Helper()
	c := r.WaitCard(sid)
	if c["action"] != action {
		t.Fatalf("card action %v, want %s: %v", c["action"], action, c)
	}
	if c["target"] != target {
		t.Fatalf("card target %v, want %v: %v", c["target"], target, c)
	}
	r.Decide(c["id"].(string), decision)
	return c
}

// allSessions returns every session through the owner API.
func allSessions(r *Relay) []map[string]any {
	r.tb.Helper()
	var out struct {
		Sessions []map[string]any `json:"sessions"`
	}
	if st := r.Owner("GET", "/api/v1/sessions?scope=all&limit=1000", nil, &out); st != http.StatusOK {
		r.tb.Fatalf("list sessions: status %d", st)
	}
	return out.Sessions
}

// childSessions lists the ids of the sessions an agent of conversation orch started.
func childSessions(r *Relay, orch string) []string {
	r.tb.Helper()
	var ids []string
	for _, s := range allSessions(r) {
		if sb, ok := s["startedBy"].(map[string]any); ok && sb["session"] == orch {
			ids = append(ids, s["id"].(string))
		}
	}
	return ids
}

// roleTexts returns the texts of the messages with role.
func roleTexts(msgs []map[string]any, role string) []string {
	var out []string
	for _, m := range msgs {
		if m["role"] == role {
			out = append(out, m["text"].(string))
		}
	}
	return out
}

// metricSample reads one sample of the relay's registry (0 when absent).
func metricSample(t testing.TB, r *Relay, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := r.App.Metrics().Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// callTolerant calls relay_tool from any goroutine: it reports problems as an error.
func callTolerant(m *MCP, args map[string]any) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := m.Session.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: args})
	if err != nil {
		return nil, err
	}
	if len(res.Content) != 1 {
		return nil, fmt.Errorf("%d content items", len(res.Content))
	}
	txt, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return nil, fmt.Errorf("content %T", res.Content[0])
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(txt.Text), &env); err != nil {
		return nil, err
	}
	if res.IsError != (env["ok"] == false) {
		return nil, fmt.Errorf("isError %v but envelope %v", res.IsError, env)
	}
	return env, nil
}

// ---- R6.1 the 4-at-work cap under concurrent calls, two processes ----

func TestFourAtWorkCapConcurrent(t *testing.T) {
	NeedsSharedRedis(t, "two relay processes (API + worker each) on one Redis")
	t.Parallel()
	noLoop := func(c *config.Config) { c.Limits.AgentPromptsBeforeCard = 1000 }
	r1 := Start(t, Options{Config: noLoop})
	r2 := Start(t, Options{Redis: r1.Redis, Config: noLoop}) // a second API + worker process on the same Redis
	st := r1.App.Store()
	o := r1.NewSession(map[string]any{"title": "orchestrator"})

	// The first create_session asks once; afterwards calls need no card (and no turn).
	tid := r1.Message(o.ID, Script(stepTool(map[string]any{"action": "create_session", "relay": "this", "text": "warm 0", "wait_seconds": 10})))
	decideCard(t, r1, o.ID, "create_session", nil, "allow")
	mustEnvOK(t, scriptToolEnvs(t, r1, tid, 1)[0])
	m1, m2 := r1.Connect(o.Token, nil), r2.Connect(o.Token, nil)
	for i := 1; i < 6; i++ { // six idle children
		env := m1.MustOK(map[string]any{"action": "create_session", "relay": "this", "text": fmt.Sprintf("warm %d", i), "wait_seconds": 10})
		if env["status"] != "done" {
			t.Fatalf("warm-up child %d: %v", i, env)
		}
	}
	idle := childSessions(r1, o.ID)
	if len(idle) != 6 {
		t.Fatalf("%d children, want 6", len(idle))
	}
	if n, _ := st.BusyCount(context.Background(), o.ID); n != 0 {
		t.Fatalf("busy count %d with all children idle", n)
	}

	// A monitor samples the semaphore and, independently, the children's queues.
	var maxSem, maxDerived int
	stopMon := make(chan struct{})
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		ctx := context.Background()
		for {
			select {
			case <-stopMon:
				return
			default:
			}
			if n, err := st.BusyCount(ctx, o.ID); err == nil && n > maxSem {
				maxSem = n
			}
			ids, _, err := st.ListSessionIDs(ctx, "all", 1000)
			if err == nil {
				ss, _ := st.GetSessions(ctx, ids)
				busy := 0
				for _, s := range ss {
					if s == nil || s.StartedBy == nil || s.StartedBy.Session != o.ID {
						continue
					}
					cur, _ := st.CurrentTurn(ctx, s.ID)
					q, _ := st.QueuedTurns(ctx, s.ID)
					if cur != "" || len(q) > 0 {
						busy++
					}
				}
				if busy > maxDerived {
					maxDerived = busy
				}
			}
			time.Sleep(5 * time.Millisecond) // sampling interval, not a wait for work
		}
	}()

	// Ten concurrent calls through both API processes: six sends to idle children, four creates.
	long := Script(stepSleep(6000), stepReply("long done"))
	type call struct {
		args map[string]any
		env  map[string]any
		err  error
	}
	calls := make([]*call, 0, 10)
	for _, sid := range idle {
		calls = append(calls, &call{args: map[string]any{"action": "send", "relay": "this", "session": sid, "text": long, "wait_seconds": 0}})
	}
	for i := 0; i < 4; i++ {
		calls = append(calls, &call{args: map[string]any{"action": "create_session", "relay": "this", "text": long, "wait_seconds": 0}})
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range calls {
		m := m1
		if i%2 == 1 {
			m = m2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c.env, c.err = callTolerant(m, c.args)
		}()
	}
	close(start)
	wg.Wait()

	var busy []string // children the burst made busy
	var okCreates, limited int
	for _, c := range calls {
		if c.err != nil {
			t.Fatalf("call %v: %v", c.args["action"], c.err)
		}
		switch {
		case c.env["ok"] == true:
			busy = append(busy, c.env["session"].(string))
			if c.args["action"] == "create_session" {
				okCreates++
			}
		case c.env["code"] == "REMOTE_RELAY_SESSION_LIMIT":
			limited++
			nothing := "Nothing was sent."
			if c.args["action"] == "create_session" {
				nothing = "No session was created."
			}
			if !strings.Contains(c.env["error"].(string), nothing) {
				t.Errorf("limit error %q lacks %q", c.env["error"], nothing)
			}
		default:
			t.Fatalf("call %v: unexpected %v", c.args["action"], c.env)
		}
	}
	if len(busy) != 4 || limited != 6 {
		t.Fatalf("%d calls succeeded and %d hit the limit, want 4 and 6", len(busy), limited)
	}
	if len(childSessions(r1, o.ID)) != 6+okCreates {
		t.Fatalf("%d children, want %d: a refused create_session created a session", len(childSessions(r1, o.ID)), 6+okCreates)
	}

	// A prompt to a child that is already busy just queues.
	extra := m2.MustOK(map[string]any{"action": "send", "relay": "this", "session": busy[0], "text": "queued behind", "wait_seconds": 0})
	if extra["status"] != "queued" {
		t.Fatalf("send to a busy child: %v", extra)
	}
	// An idle child, or a new one, is refused while four are at work.
	var idleNow []string
	for _, sid := range childSessions(r1, o.ID) {
		if !slices.Contains(busy, sid) {
			idleNow = append(idleNow, sid)
		}
	}
	m1.MustFail(map[string]any{"action": "send", "relay": "this", "session": idleNow[0], "text": "x", "wait_seconds": 0}, "REMOTE_RELAY_SESSION_LIMIT")
	m2.MustFail(map[string]any{"action": "create_session", "relay": "this", "text": "x", "wait_seconds": 0}, "REMOTE_RELAY_SESSION_LIMIT")
	// The cap is per orchestrating conversation: another one starts sessions meanwhile.
	o2 := r2.NewSession(map[string]any{"title": "second orchestrator"})
	tid2 := r2.Message(o2.ID, Script(stepTool(map[string]any{"action": "create_session", "relay": "this", "text": "independent", "wait_seconds": 0})))
	decideCard(t, r2, o2.ID, "create_session", nil, "allow")
	mustEnvOK(t, scriptToolEnvs(t, r2, tid2, 1)[0])
	if n, _ := st.BusyCount(context.Background(), o.ID); n != 4 {
		t.Fatalf("busy count of the first orchestrator %d, want 4 (the check ran too late?)", n)
	}
	close(stopMon)
	<-monDone
	if maxSem > 4 || maxDerived > 4 {
		t.Fatalf("at most 4 children may be busy: semaphore peaked at %d, queues at %d", maxSem, maxDerived)
	}
	if maxSem != 4 {
		t.Fatalf("semaphore peaked at %d, want 4 (the monitor saw the burst)", maxSem)
	}

	// When one finishes, another may start.
	Eventually(t, 30*time.Second, func() bool {
		n, _ := st.BusyCount(context.Background(), o.ID)
		return n < 4
	}, "a busy child to finish")
	after := m1.MustOK(map[string]any{"action": "send", "relay": "this", "session": idleNow[0], "text": "now there is room", "wait_seconds": 10})
	if after["status"] != "done" || after["reply"].(map[string]any)["text"] != "echo: now there is room" {
		t.Fatalf("send after a child finished: %v", after)
	}
	if got := r1.WaitTurn(extra["message_id"].(string), 30*time.Second, store.TurnDone); got.Reply != "echo: queued behind" {
		t.Fatalf("queued prompt reply %q", got.Reply)
	}
}

// ---- per-session order with two workers ----

// Architecture "Per-session order": 100 prompts to one session, two worker processes:
// every reply arrives and the turns ran one at a time in the order queued.
func TestOrderHundredPromptsTwoWorkers(t *testing.T) {
	NeedsSharedRedis(t, "a serve and a second worker process on one Redis")
	t.Parallel()
	r1 := Start(t, Options{})
	r2 := Start(t, Options{Redis: r1.Redis, Mode: "worker"})
	s := r1.NewSession(map[string]any{"title": "busy"})
	const n = 100
	ids := make([]string, n)
	for i := range ids {
		ids[i] = r1.Message(s.ID, strconv.Itoa(i))
	}
	r1.WaitTurn(ids[n-1], 120*time.Second, store.TurnDone)
	var prev *store.Turn
	for i, id := range ids {
		tr := r1.Turn(id)
		if tr.Status != store.TurnDone || tr.Reply != "echo: "+strconv.Itoa(i) {
			t.Fatalf("turn %d: %s %q", i, tr.Status, tr.Reply)
		}
		if prev != nil && (tr.StartedAt.Before(prev.EndedAt) || tr.StartedAt.Before(prev.StartedAt)) {
			t.Fatalf("turn %d started %s, before turn %d ended %s", i, tr.StartedAt, i-1, prev.EndedAt)
		}
		prev = tr
	}
	want := make([]string, n)
	for i := range want {
		want[i] = "echo: " + strconv.Itoa(i)
	}
	if got := roleTexts(r1.Messages(s.ID, ""), "assistant"); !slices.Equal(got, want) {
		t.Fatalf("assistant replies out of order:\n got %v\nwant %v", got, want)
	}
	started := func(r *Relay) float64 {
		return metricSample(t, r, "relay_turns_started_total", map[string]string{"provider": "scripted"})
	}
	s1, s2 := started(r1), started(r2)
	t.Logf("turns run: serve process %v, worker process %v", s1, s2)
	if s1+s2 != n {
		t.Fatalf("%v turns started for %d prompts", s1+s2, n)
	}
	if s1 == 0 || s2 == 0 {
		t.Fatalf("both processes should have run turns: %v and %v", s1, s2)
	}
}
