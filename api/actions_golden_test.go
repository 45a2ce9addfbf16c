package api_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

// actionGolden records each relay_tool action's results in its own file,
// testdata/actions/<action>.golden, the volatile values normalised as in
// TestGoldenOwnerJSON.
type actionGolden struct {
	*golden
	files map[string]*strings.Builder
	// volatile, when set, replaces its matches in the next result with <RACY>
	// (a turn just queued runs or not yet).
	volatile *regexp.Regexp
}

// take moves what the last call recorded into its action's file.
func (ag *actionGolden) take(action string) {
	b, ok := ag.files[action]
	if !ok {
		b = &strings.Builder{}
		ag.files[action] = b
	}
	rec := ag.buf.String()
	if ag.volatile != nil {
		rec = ag.volatile.ReplaceAllString(rec, "<RACY>")
		ag.volatile = nil
	}
	b.WriteString(rec)
	ag.buf.Reset()
}

// call runs one relay_tool call over MCP and records its result.
func (ag *actionGolden) call(m *relaytest.MCP, name string, args map[string]any) map[string]any {
	ag.t.Helper()
	out := ag.tool(m, name, args)
	ag.take(fmt.Sprint(args["action"]))
	return out
}

// turn runs one relay_tool call inside a turn of s and records its result.
func (ag *actionGolden) turn(r *relaytest.Relay, name string, s relaytest.Session, args map[string]any, decision string) map[string]any {
	ag.t.Helper()
	out := ag.inTurn(r, name, s, args, decision)
	ag.take(fmt.Sprint(args["action"]))
	return out
}

// TestGoldenActions pins the raw JSON of every relay_tool action's result,
// its success and its main errors, over MCP on a real relay and a paired one
// (go test ./api -run TestGoldenActions -update rewrites testdata/actions/).
func TestGoldenActions(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	lab := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "lab" }})
	ag := &actionGolden{golden: &golden{t: t, ids: map[string]string{}}, files: map[string]*strings.Builder{}}
	ag.rep = []string{lab.URL, "<LAB_URL>", r.URL, "<URL>", r.Config.DefaultCwd, "<DIR>", lab.Config.DefaultCwd, "<LAB_DIR>"}

	a := r.NewSession(map[string]any{"title": "alpha"})
	b := r.NewSession(map[string]any{"title": "beta"})
	r.Owner("PATCH", "/api/v1/sessions/"+a.ID, map[string]any{"may_create_sessions": true}, nil)
	ag.norm(a.ID)
	ag.norm(b.ID)
	ma, mb := r.Connect(a.Token, nil), r.Connect(b.Token, nil)
	const nosuch = "0000000000000000ffffffffffffffff"

	// Reads.
	ag.call(ma, "list_relays alone", map[string]any{"action": "list_relays"})
	ag.call(ma, "relay_info", map[string]any{"action": "relay_info", "relay": "this"})
	ag.call(ma, "relay_info on an unknown relay", map[string]any{"action": "relay_info", "relay": "nowhere"})
	ag.call(ma, "usage", map[string]any{"action": "usage", "relay": "this"})
	ag.call(ma, "list_sessions", map[string]any{"action": "list_sessions", "relay": "this"})
	ag.call(ma, "read_session", map[string]any{"action": "read_session", "relay": "this", "session": b.ID})
	ag.call(ma, "read_session of no such session", map[string]any{"action": "read_session", "relay": "this", "session": nosuch})
	ag.call(ma, "read_session without a session", map[string]any{"action": "read_session", "relay": "this"})

	// Send and wait.
	ag.call(ma, "send", map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "hello beta"})
	ag.call(ma, "send without text", map[string]any{"action": "send", "relay": "this", "session": b.ID})
	ag.call(ma, "send to no such session", map[string]any{"action": "send", "relay": "this", "session": nosuch, "text": "hi"})
	ag.volatile = regexp.MustCompile(`queued|running`)
	sent := ag.call(ma, "send, no wait", map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": relaytest.Script(map[string]any{"sleep_ms": 300}, map[string]any{"reply": "slow"}), "wait_seconds": 0})
	ag.call(ma, "wait", map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": str(sent, "message_id"), "wait_seconds": 20})
	ag.call(ma, "wait for no such message", map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": nosuch, "wait_seconds": 0})
	ag.call(ma, "wait without a message", map[string]any{"action": "wait", "relay": "this", "session": b.ID})

	// Tasks.
	task := r.Message(b.ID, relaytest.Script(map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"1 passed"}, "exit": 0, "background": true}}))
	r.WaitTurn(task, 20*time.Second, "done")
	rs := ag.call(ma, "read_session for its task", map[string]any{"action": "read_session", "relay": "this", "session": b.ID, "last": 1})
	taskID := ""
	if ts, ok := rs["tasks"].([]any); ok && len(ts) > 0 {
		if t0, ok := ts[0].(map[string]any); ok {
			taskID = str(t0, "taskId")
		}
	}
	ag.call(ma, "read_task_output", map[string]any{"action": "read_task_output", "relay": "this", "session": b.ID, "task_id": taskID})
	ag.call(ma, "read_task_output of no such task", map[string]any{"action": "read_task_output", "relay": "this", "session": b.ID, "task_id": "nosuch"})

	// Create and update.
	child := ag.turn(r, "create_session", a, map[string]any{"action": "create_session", "title": "gamma", "text": "hi gamma"}, "allow")
	ag.norm(str(child, "session"))
	r.WaitTurn(str(child, "message_id"), 20*time.Second, "done")
	ag.call(ma, "create_session outside a turn", map[string]any{"action": "create_session", "relay": "this", "title": "delta", "text": "hi"})
	ag.call(ma, "create_session without text", map[string]any{"action": "create_session", "relay": "this", "title": "delta"})
	ag.call(mb, "create_session not allowed", map[string]any{"action": "create_session", "relay": "this", "title": "delta", "text": "hi"})
	ag.turn(r, "update_session", a, map[string]any{"action": "update_session", "session": b.ID, "title": "beta renamed", "group": "Ops"}, "allow")
	ag.call(ma, "update_session outside a turn", map[string]any{"action": "update_session", "relay": "this", "session": b.ID, "title": "beta again"})
	ag.call(ma, "update_session of no such session", map[string]any{"action": "update_session", "relay": "this", "session": nosuch, "title": "x"})
	ag.call(ma, "update_session with nothing", map[string]any{"action": "update_session", "relay": "this", "session": b.ID})

	// Subscriptions.
	sub := ag.turn(r, "subscribe", a, map[string]any{"action": "subscribe", "sessions": []string{b.ID}}, "allow")
	ag.call(ma, "subscribe to no such session", map[string]any{"action": "subscribe", "sessions": []string{nosuch}})
	ag.call(ma, "list_subscriptions", map[string]any{"action": "list_subscriptions"})
	ag.call(mb, "list_subscriptions, none", map[string]any{"action": "list_subscriptions"})
	subID := ""
	if s, ok := sub["subscription"].(map[string]any); ok {
		subID = str(s, "id")
	}
	ag.call(ma, "unsubscribe", map[string]any{"action": "unsubscribe", "subscription_id": subID})
	ag.call(ma, "unsubscribe again", map[string]any{"action": "unsubscribe", "subscription_id": subID})
	ag.turn(r, "subscribe to all", a, map[string]any{"action": "subscribe", "sessions": []string{"all"}, "events": []string{"turn_end"}}, "allow")
	ag.turn(r, "subscribe to one, ended by a transfer", a, map[string]any{"action": "subscribe", "sessions": []string{b.ID}}, "allow")
	ag.turn(r, "transfer_subscriptions", b, map[string]any{"action": "transfer_subscriptions", "from": a.ID}, "allow")
	ag.call(ma, "transfer_subscriptions from no such session", map[string]any{"action": "transfer_subscriptions", "from": nosuch})
	ag.call(ma, "transfer_subscriptions without from", map[string]any{"action": "transfer_subscriptions"})

	// Schedules.
	sch := ag.call(ma, "schedule", map[string]any{"action": "schedule", "session": a.ID, "every_minutes": 60, "text": "ping"})
	ag.call(ma, "schedule once", map[string]any{"action": "schedule", "session": a.ID, "at": "2099-01-01T10:00:00Z", "text": "later"})
	ag.call(ma, "schedule without a time", map[string]any{"action": "schedule", "session": a.ID, "text": "ping"})
	ag.call(ma, "list_schedules", map[string]any{"action": "list_schedules"})
	ag.call(ma, "unschedule", map[string]any{"action": "unschedule", "schedule_id": str(sch, "schedule_id")})
	ag.call(ma, "unschedule again", map[string]any{"action": "unschedule", "schedule_id": str(sch, "schedule_id")})

	// Questions.
	ask := ag.call(ma, "ask", map[string]any{"action": "ask", "question": "ship it?", "options": []string{"yes", "no"}, "recommendation": "yes"})
	ag.call(ma, "ask without a question", map[string]any{"action": "ask"})
	ag.call(mb, "list_questions", map[string]any{"action": "list_questions", "session": a.ID})
	ag.call(ma, "withdraw", map[string]any{"action": "withdraw", "question_id": str(ask, "question_id")})
	ag.call(ma, "withdraw again", map[string]any{"action": "withdraw", "question_id": str(ask, "question_id")})
	ag.call(ma, "answer_question without a question", map[string]any{"action": "answer_question", "relay": "this", "session": b.ID, "answer": "yes"})
	ag.call(ma, "answer_question, none pending", map[string]any{"action": "answer_question", "relay": "this", "session": b.ID, "question_id": "nosuch", "answer": "yes"})

	// Stop and archive.
	ag.call(ma, "stop, nothing running", map[string]any{"action": "stop", "relay": "this", "session": b.ID})
	ag.call(ma, "stop no such session", map[string]any{"action": "stop", "relay": "this", "session": nosuch})
	ag.call(ma, "archive", map[string]any{"action": "archive", "relay": "this", "session": str(child, "session")})
	ag.call(ma, "archive no such session", map[string]any{"action": "archive", "relay": "this", "session": nosuch})

	// On a paired relay.
	lt := ag.owner(lab, "new peer token on lab", "POST", "/api/v1/peer-tokens", map[string]any{"label": "for desk"})
	ag.owner(r, "pair", "POST", "/api/v1/relays", map[string]any{"url": lab.URL, "token": str(lt, "token")})
	rt := ag.owner(r, "new peer token for lab", "POST", "/api/v1/peer-tokens", map[string]any{"label": "for lab"})
	ag.owner(lab, "pair back", "POST", "/api/v1/relays", map[string]any{"url": r.URL, "token": str(rt, "token"), "name": "desk"})
	ag.owner(r, "patch relay", "PATCH", "/api/v1/relays/lab", map[string]any{"permission": "full"})
	ag.buf.Reset()
	r.WaitTurn(r.Message(a.ID, "ask @lab something"), 20*time.Second, "done")
	ls := lab.NewSession(map[string]any{"title": "lab one"})
	ag.norm(ls.ID)
	ag.call(ma, "list_relays paired", map[string]any{"action": "list_relays"})
	ag.call(ma, "relay_info on lab", map[string]any{"action": "relay_info", "relay": "lab"})
	ag.call(ma, "list_sessions on lab", map[string]any{"action": "list_sessions", "relay": "lab"})
	ag.call(ma, "read_session on lab", map[string]any{"action": "read_session", "relay": "lab", "session": ls.ID})
	ag.call(ma, "read_session of no such session on lab", map[string]any{"action": "read_session", "relay": "lab", "session": nosuch})
	ag.call(ma, "send on lab", map[string]any{"action": "send", "relay": "lab", "session": ls.ID, "text": "hello lab"})
	lc := ag.turn(r, "create_session on lab", a, map[string]any{"action": "create_session", "relay": "lab", "title": "lab two", "text": "hi"}, "allow")
	ag.norm(str(lc, "session"))
	lab.WaitTurn(str(lc, "message_id"), 20*time.Second, "done")
	ag.turn(r, "update_session on lab", a, map[string]any{"action": "update_session", "relay": "lab", "session": ls.ID, "title": "lab one renamed"}, "allow")
	ag.turn(r, "subscribe on lab", a, map[string]any{"action": "subscribe", "relay": "lab", "sessions": []string{ls.ID}}, "allow")
	ag.call(ma, "list_subscriptions on lab", map[string]any{"action": "list_subscriptions", "relay": "lab"})
	rsch := ag.call(ma, "schedule on lab", map[string]any{"action": "schedule", "relay": "lab", "session": ls.ID, "every_minutes": 60, "text": "ping lab"})
	ag.call(ma, "list_schedules on lab", map[string]any{"action": "list_schedules", "relay": "lab"})
	ag.call(ma, "unschedule on lab", map[string]any{"action": "unschedule", "relay": "lab", "schedule_id": str(rsch, "schedule_id")})
	rask := ag.call(ma, "ask on lab", map[string]any{"action": "ask", "relay": "lab", "session": ls.ID, "question": "lab ok?"})
	ag.call(ma, "list_questions on lab", map[string]any{"action": "list_questions", "relay": "lab"})
	ag.call(ma, "withdraw on lab", map[string]any{"action": "withdraw", "relay": "lab", "question_id": str(rask, "question_id")})
	ag.call(ma, "stop on lab", map[string]any{"action": "stop", "relay": "lab", "session": ls.ID})
	ag.call(ma, "archive on lab", map[string]any{"action": "archive", "relay": "lab", "session": str(lc, "session")})

	ag.checkFiles(filepath.Join("testdata", "actions"))
}

// checkFiles writes (-update) or compares each action's file.
func (ag *actionGolden) checkFiles(dir string) {
	t := ag.t
	names := make([]string, 0, len(ag.files))
	for n := range ag.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := filepath.Join(dir, n+".golden")
		got := ag.files[n].String()
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (run with -update to write it)", err)
			continue
		}
		if n, x, y, differ := firstDiff(got, string(want)); differ {
			t.Errorf("%s differs at line %d:\n got: %s\nwant: %s", path, n, x, y)
		}
	}
}
