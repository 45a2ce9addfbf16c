package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// golden keeps the raw bodies of a run, volatile values replaced.
type golden struct {
	t   *testing.T
	buf bytes.Buffer
	ids map[string]string // a hex id seen → its placeholder
	rep []string          // other values to replace (temp folders, URLs), old/new pairs
	// racy, when set, replaces the states of the next answer (a turn just queued runs or not yet).
	racy *regexp.Regexp
}

var (
	tsRE  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	hexRE = regexp.MustCompile(`[0-9a-f]{8,}`)
	setRE = regexp.MustCompile(`("ungrouped":\[)([^\]]*)\]`)
)

func (g *golden) norm(s string) string {
	for i := 0; i+1 < len(g.rep); i += 2 {
		s = strings.ReplaceAll(s, g.rep[i], g.rep[i+1])
	}
	s = tsRE.ReplaceAllString(s, "<TIME>")
	return hexRE.ReplaceAllStringFunc(s, func(m string) string {
		if p, ok := g.ids[m]; ok {
			return p
		}
		if len(m) < 12 { // an id's first 8 characters (or a short one)
			for id, p := range g.ids {
				if strings.HasPrefix(id, m) {
					return p + "/" + fmt.Sprint(len(m))
				}
			}
		}
		p := fmt.Sprintf("<ID%d>", len(g.ids)+1)
		g.ids[m] = p
		return p
	})
}

// add records one answer.
func (g *golden) add(name string, status int, body string) {
	body = strings.TrimRight(body, "\n")
	if g.racy != nil {
		body = g.racy.ReplaceAllString(body, `"state":"<STATE>"`)
	}
	body = g.norm(body)
	// A set's members come in any order: sorted here.
	body = setRE.ReplaceAllStringFunc(body, func(m string) string {
		sub := setRE.FindStringSubmatch(m)
		items := strings.Split(sub[2], ",")
		sort.Strings(items)
		return sub[1] + strings.Join(items, ",") + "]"
	})
	fmt.Fprintf(&g.buf, "### %s %d\n%s\n", g.norm(name), status, body)
}

// owner sends an owner API request and records its raw answer; it returns the body decoded.
func (g *golden) owner(r *relaytest.Relay, name, method, path string, body any) map[string]any {
	g.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.URL+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+relaytest.OwnerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	g.add(name+": "+method+" "+path, resp.StatusCode, string(raw))
	g.racy = nil
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

// tool calls relay_tool and records the raw text of its result.
func (g *golden) tool(m *relaytest.MCP, name string, args map[string]any) map[string]any {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := m.Session.CallTool(ctx, &mcp.CallToolParams{Name: "relay_tool", Arguments: args})
	if err != nil {
		g.t.Fatalf("%s: %v", name, err)
	}
	txt := res.Content[0].(*mcp.TextContent).Text
	g.add(name+": relay_tool "+fmt.Sprint(args["action"]), map[bool]int{false: 0, true: 1}[res.IsError], txt)
	var out map[string]any
	_ = json.Unmarshal([]byte(txt), &out)
	return out
}

// inTurn runs one relay_tool call as session s inside a turn of s, as
// relaytest's InTurn does (with a decision its card is answered), and
// records the raw line of its result.
func (g *golden) inTurn(r *relaytest.Relay, name string, s relaytest.Session, tool map[string]any, decision string) map[string]any {
	g.t.Helper()
	if _, ok := tool["relay"]; !ok {
		tool["relay"] = "this"
	}
	mid := r.Message(s.ID, relaytest.Script(map[string]any{"tool": tool}))
	if decision != "" { // its card, unless the call failed before one
		relaytest.Eventually(g.t, 15*time.Second, func() bool {
			for _, c := range r.Cards() {
				if c["session"] == s.ID {
					r.Decide(c["id"].(string), decision)
					return true
				}
			}
			return r.Turn(mid).Status == "done"
		}, "a card in session %s", s.ID)
	}
	turn := r.WaitTurn(mid, 30*time.Second, "done", "error", "stopped")
	if turn.Status != "done" {
		g.t.Fatalf("%s: turn ended %s: %s", name, turn.Status, turn.Error)
	}
	for _, l := range strings.Split(turn.Reply, "\n") {
		l = strings.TrimSpace(l)
		var out map[string]any
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &out) == nil {
			if ok, found := out["ok"].(bool); found {
				g.add(name+": relay_tool in a turn "+fmt.Sprint(tool["action"]), map[bool]int{true: 0, false: 1}[ok], l)
				return out
			}
		}
	}
	g.t.Fatalf("%s: no tool result in the reply %q", name, turn.Reply)
	return nil
}

func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }

// TestGoldenOwnerJSON pins the raw JSON of the owner routes and the tool
// results built from the domain's owner operations (go test ./api -run
// TestGoldenOwnerJSON -update rewrites testdata/owner.golden).
func TestGoldenOwnerJSON(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	lab := relaytest.Start(t, relaytest.Options{Config: func(c *config.Config) { c.Name = "lab" }})
	g := &golden{t: t, ids: map[string]string{}}
	g.rep = []string{lab.URL, "<LAB_URL>", r.URL, "<URL>", r.Config.DefaultCwd, "<DIR>", lab.Config.DefaultCwd, "<LAB_DIR>"}

	grp := g.owner(r, "create group", "POST", "/api/v1/groups", map[string]any{"name": "Release"})
	gid := str(grp, "id")
	one := g.owner(r, "create session", "POST", "/api/v1/sessions", map[string]any{"title": "one", "group": gid})
	g.racy = regexp.MustCompile(`"state":"[a-z_]+"`)
	two := g.owner(r, "create session with a prompt", "POST", "/api/v1/sessions", map[string]any{"title": "two", "group": gid,
		"text": relaytest.Script(map[string]any{"sleep_ms": 400}, map[string]any{"reply": "hello back"})}) // not done when it answers
	r.WaitTurn(str(two, "message_id"), 20*time.Second, "done")
	id1, id2 := str(one, "id"), str(two, "id")
	msg := g.owner(r, "message", "POST", "/api/v1/sessions/"+id2+"/messages", map[string]any{"text": "again"})
	r.WaitTurn(str(msg, "message_id"), 20*time.Second, "done")
	g.owner(r, "stop, nothing running", "POST", "/api/v1/sessions/"+id2+"/stop", nil)
	g.owner(r, "patch session", "PATCH", "/api/v1/sessions/"+id2, map[string]any{"title": "two renamed", "may_create_sessions": true})
	g.owner(r, "list groups", "GET", "/api/v1/groups", nil)
	g.owner(r, "rename group", "PATCH", "/api/v1/groups/"+gid, map[string]any{"name": "Release 2"})

	m1 := r.Connect(str(one, "token"), nil)
	ask := g.tool(m1, "ask", map[string]any{"action": "ask", "relay": "this", "question": "ship it?", "options": []string{"yes", "no"}, "recommendation": "yes"})
	sub := g.inTurn(r, "subscribe", relaytest.Session{ID: id1, Token: str(one, "token")}, map[string]any{"action": "subscribe", "sessions": []string{id2}}, "allow")
	g.inTurn(r, "subscribe to all", relaytest.Session{ID: id2, Token: str(two, "token")}, map[string]any{"action": "subscribe", "sessions": []string{"all"},
		"events": []string{"turn_end"}, "match": "deploy", "digest_minutes": 30, "heartbeat_minutes": 60, "exclude": []string{id1},
		"quiet_hours": map[string]any{"from": "22:00", "to": "07:00", "tz": "UTC"}}, "allow")
	m2 := r.Connect(str(two, "token"), nil)
	child, _ := r.InTurn(relaytest.Session{ID: id2, Token: str(two, "token")}, map[string]any{"action": "create_session", "title": "child", "text": "hi child"}, "allow")
	r.WaitTurn(str(child, "message_id"), 20*time.Second, "done")
	g.tool(m2, "send", map[string]any{"action": "send", "relay": "this", "session": id1, "text": "from two"})
	task := r.Message(id2, relaytest.Script(map[string]any{"task": map[string]any{"description": "npm test", "lines": []string{"1 passed"}, "exit": 0, "background": true}}))
	r.WaitTurn(task, 20*time.Second, "done")
	sched := g.tool(m1, "schedule", map[string]any{"action": "schedule", "relay": "this", "session": id1, "every_minutes": 60, "text": "ping"})
	g.tool(m2, "schedule for another", map[string]any{"action": "schedule", "relay": "this", "session": id1, "every_minutes": 30, "text": "from two"})
	g.owner(r, "list schedules", "GET", "/api/v1/schedules", nil)
	g.tool(m1, "list_schedules", map[string]any{"action": "list_schedules", "relay": "this"})
	g.tool(m2, "list_schedules", map[string]any{"action": "list_schedules", "relay": "this"})
	g.tool(m1, "list_subscriptions", map[string]any{"action": "list_subscriptions", "relay": "this"})
	g.tool(m2, "list_subscriptions", map[string]any{"action": "list_subscriptions", "relay": "this"})
	g.tool(m2, "list_questions", map[string]any{"action": "list_questions", "relay": "this", "session": id1})
	g.owner(r, "read session", "GET", "/api/v1/sessions/"+id1, nil)
	g.owner(r, "read session two", "GET", "/api/v1/sessions/"+id2+"?last=10", nil)
	g.owner(r, "list sessions", "GET", "/api/v1/sessions", nil)
	g.tool(m1, "read_session", map[string]any{"action": "read_session", "relay": "this", "session": id2})
	g.tool(m1, "list_sessions", map[string]any{"action": "list_sessions", "relay": "this"})
	g.owner(r, "inbox", "GET", "/api/v1/inbox", nil)
	g.owner(r, "answer ask", "POST", "/api/v1/inbox/"+str(ask, "question_id"), map[string]any{"choice": "yes"})
	subID := ""
	if s, ok := sub["subscription"].(map[string]any); ok {
		subID = str(s, "id")
	}
	g.owner(r, "unsubscribe", "DELETE", "/api/v1/subscriptions/"+subID, nil)
	g.owner(r, "cancel schedule", "DELETE", "/api/v1/schedules/"+str(sched, "schedule_id"), nil)
	g.owner(r, "list schedules after cancel", "GET", "/api/v1/schedules", nil)
	g.tool(m1, "list_schedules after cancel", map[string]any{"action": "list_schedules", "relay": "this"})
	g.tool(m1, "list_subscriptions after unsubscribe", map[string]any{"action": "list_subscriptions", "relay": "this"})
	g.tool(m1, "list_questions after answer", map[string]any{"action": "list_questions", "relay": "this"})

	// Peer tokens and pairing.
	pt := g.owner(r, "new peer token", "POST", "/api/v1/peer-tokens", map[string]any{"label": "spare"})
	g.owner(r, "revoke peer token", "DELETE", "/api/v1/peer-tokens/"+str(pt, "id"), nil)
	lt := g.owner(lab, "new peer token on lab", "POST", "/api/v1/peer-tokens", map[string]any{"label": "for desk"})
	g.owner(r, "pair", "POST", "/api/v1/relays", map[string]any{"url": lab.URL, "token": str(lt, "token")})
	rt := g.owner(r, "new peer token for lab", "POST", "/api/v1/peer-tokens", map[string]any{"label": "for lab"})
	g.owner(lab, "pair back", "POST", "/api/v1/relays", map[string]any{"url": r.URL, "token": str(rt, "token"), "name": "desk"})
	g.owner(r, "patch relay", "PATCH", "/api/v1/relays/lab", map[string]any{"permission": "full"})
	g.owner(r, "list relays", "GET", "/api/v1/relays", nil)
	r.WaitTurn(r.Message(id1, "ask @lab something"), 20*time.Second, "done")
	g.tool(m1, "list_relays", map[string]any{"action": "list_relays"})
	ls := lab.NewSession(map[string]any{"title": "lab one"})
	g.norm(ls.ID)
	remote := g.tool(m1, "ask on lab", map[string]any{"action": "ask", "relay": "lab", "session": ls.ID, "question": "lab ok?"})
	g.owner(r, "inbox with paired", "GET", "/api/v1/inbox?relays=all", nil)
	g.owner(r, "answer paired ask", "POST", "/api/v1/inbox/"+str(remote, "question_id")+"?relay=lab", map[string]any{"answer": "fine"})
	g.owner(r, "unpair", "DELETE", "/api/v1/relays/lab", nil)

	g.owner(r, "list groups again", "GET", "/api/v1/groups", nil) // the child's group, headed by two
	g.owner(r, "archive", "POST", "/api/v1/sessions/"+id1+"/archive", nil)
	g.owner(r, "delete session", "DELETE", "/api/v1/sessions/"+id1, nil)
	g.owner(r, "dissolve group", "DELETE", "/api/v1/groups/"+gid, nil)

	// R23.5–R23.7.
	ext := g.owner(r, "create external session", "POST", "/api/v1/sessions", map[string]any{"provider": "external", "title": "my client"})
	g.owner(r, "new token", "POST", "/api/v1/sessions/"+str(ext, "id")+"/token", nil)
	g.owner(r, "kill, nothing running", "POST", "/api/v1/sessions/"+id2+"/kill", nil)
	g.owner(r, "patch session group", "PATCH", "/api/v1/sessions/"+id2, map[string]any{"group": "Ops"})
	ops := g.owner(r, "create group Later", "POST", "/api/v1/groups", map[string]any{"name": "Later"})
	g.owner(r, "order groups", "PUT", "/api/v1/groups/order", map[string]any{"ids": []string{str(ops, "id")}})

	path := filepath.Join("testdata", "owner.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, g.buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if n, a, b, differ := firstDiff(g.buf.String(), string(want)); differ {
		t.Fatalf("%s differs at line %d:\n got: %s\nwant: %s", path, n, a, b)
	}
}

// firstDiff finds the first line (from 1) where got and want differ.
func firstDiff(got, want string) (n int, g, w string, differ bool) {
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		g, w = "", ""
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			return i + 1, g, w, true
		}
	}
	return 0, "", "", false
}
