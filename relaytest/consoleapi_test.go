package relaytest

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/store"
)

// R23.5: POST /api/v1/sessions/{id}/token gives an external session a new
// token; the old one is refused at once, in this process and in another
// serve process on the same Redis that had it cached (R18.2, R18.19).
func TestExternalNewToken(t *testing.T) {
	t.Parallel()
	a := Start(t, Options{})
	var b *Relay
	if !EmbeddedMode() {
		b = Start(t, Options{Redis: a.Redis})
	}
	ext := a.NewSession(map[string]any{"provider": "external", "title": "my terminal"})
	if ext.Token == "" {
		t.Fatal("POST /sessions with provider external answered no token")
	}
	for _, r := range []*Relay{a, b} {
		if r != nil && r.MCPStatus(ext.Token) != http.StatusOK { // cached now
			t.Fatalf("the external session's first token is refused on %s", r.URL)
		}
	}
	var out map[string]any
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/token", nil, &out); st != http.StatusOK {
		t.Fatalf("new token: %d %v", st, out)
	}
	tok, _ := out["token"].(string)
	if tok == "" || tok == ext.Token || out["session"] != ext.ID {
		t.Fatalf("new token answer: %v", out)
	}
	for _, r := range []*Relay{a, b} {
		if r == nil {
			continue
		}
		if st := r.MCPStatus(ext.Token); st != http.StatusUnauthorized {
			t.Fatalf("the old token after a new one on %s: %d, want 401", r.URL, st)
		}
		if st := r.MCPStatus(tok); st != http.StatusOK {
			t.Fatalf("the new token on %s: %d, want 200", r.URL, st)
		}
	}
	a.Connect(tok, nil).MustOK(map[string]any{"action": "list_relays"})

	// Not an external session: a clear error, nothing changed.
	plain := a.NewSession(map[string]any{"title": "scripted"})
	out = nil
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+plain.ID+"/token", nil, &out); st != http.StatusBadRequest ||
		out["code"] != "REMOTE_RELAY_UNSUPPORTED" {
		t.Fatalf("new token of a scripted session: %d %v", st, out)
	}
	wantHas(t, "error", out["error"], "is not an external session")
	if a.MCPStatus(plain.Token) != http.StatusOK {
		t.Fatal("the refused request changed the scripted session's token")
	}
	// Archived: its token was revoked; no new one.
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/archive", nil, nil); st != http.StatusOK {
		t.Fatalf("archive: %d", st)
	}
	out = nil
	if st := a.Owner(http.MethodPost, "/api/v1/sessions/"+ext.ID+"/token", nil, &out); st != http.StatusBadRequest {
		t.Fatalf("new token of an archived session: %d %v", st, out)
	}
	if st := a.MCPStatus(tok); st != http.StatusUnauthorized {
		t.Fatalf("the archived session's token: %d, want 401", st)
	}
}

// kill is POST /api/v1/sessions/{id}/kill; it returns the answer's killed.
func kill(t *testing.T, r *Relay, sid string) bool {
	t.Helper()
	var out map[string]any
	if st := r.Owner(http.MethodPost, "/api/v1/sessions/"+sid+"/kill", nil, &out); st != http.StatusOK || out["session"] != sid {
		t.Fatalf("kill %s: %d %v", sid, st, out)
	}
	killed, ok := out["killed"].(bool)
	if !ok {
		t.Fatalf("kill %s: no killed in %v", sid, out)
	}
	return killed
}

// pidFile reads a pid an exec script wrote.
func pidFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	Eventually(t, 30*time.Second, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, "the script to write %s", path)
	return pid
}

// gone waits for a process to end.
func gone(t *testing.T, pid int, what string) {
	t.Helper()
	Eventually(t, 30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }, "%s (pid %d) to end", what, pid)
}

// execShell is a relay with the exec provider "sh" running execAgentScript.
func execShell(t *testing.T, o Options) (Options, string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(script, []byte(execAgentScript), 0o755); err != nil {
		t.Fatal(err)
	}
	o.Config = func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{ID: "sh", Name: "Shell", Type: config.TypeExec,
			Command: []string{"/bin/sh", script}, Models: []string{"sh-1"}, DefaultModel: "sh-1", Env: map[string]string{"TEST_DIR": dir}})
	}
	return o, dir
}

// R23.6: Kill session on an exec session: the running turn's process group
// ends, the turn ends as stopped; with nothing running, killed is false;
// the next turn runs a new process.
func TestKillSessionExec(t *testing.T) {
	t.Parallel()
	o, dir := execShell(t, Options{})
	r := Start(t, o)
	s := r.NewSession(map[string]any{"provider": "sh", "title": "shell"})
	if kill(t, r, s.ID) {
		t.Fatal("kill of a session that never ran: killed true")
	}
	tid := r.Message(s.ID, "hang here")
	sh, child := pidFile(t, filepath.Join(dir, "sh.pid")), pidFile(t, filepath.Join(dir, "child.pid"))
	if !kill(t, r, s.ID) {
		t.Fatal("kill of a running turn: killed false")
	}
	if tr := waitEnded(r, tid, 30*time.Second); tr.Status != store.TurnStopped {
		t.Fatalf("the killed turn ended %s (%q), want stopped", tr.Status, tr.Error)
	}
	gone(t, sh, "the turn's shell")
	gone(t, child, "the turn's child process")
	if kill(t, r, s.ID) {
		t.Fatal("kill with nothing running: killed true")
	}
	if tr := waitEnded(r, r.Message(s.ID, "again"), 30*time.Second); tr.Status != store.TurnDone || !strings.HasPrefix(tr.Reply, "got: again") {
		t.Fatalf("the turn after a kill: %s %q %q", tr.Status, tr.Reply, tr.Error)
	}
	// A session with no process of the relay at all.
	ext := r.NewSession(map[string]any{"provider": "external"})
	if kill(t, r, ext.ID) {
		t.Fatal("kill of an external session: killed true")
	}
}

// R23.6 across processes: the turn runs in one serve process, the kill is
// asked of another (the same path as Stop: the notification hub).
func TestKillSessionOtherProcess(t *testing.T) {
	NeedsSharedRedis(t, "two serve processes of one relay")
	t.Parallel()
	o, dir := execShell(t, Options{})
	a := Start(t, o)
	o.Redis = a.Redis
	b := Start(t, o)
	s := a.NewSession(map[string]any{"provider": "sh", "title": "shell"})
	tid := a.Message(s.ID, "hang here")
	sh := pidFile(t, filepath.Join(dir, "sh.pid"))
	other := otherProcess(t, a, b, tid)
	if !kill(t, other, s.ID) {
		t.Fatal("kill asked of the other process: killed false")
	}
	if tr := waitEnded(a, tid, 30*time.Second); tr.Status != store.TurnStopped {
		t.Fatalf("the killed turn ended %s (%q), want stopped", tr.Status, tr.Error)
	}
	gone(t, sh, "the turn's shell")
}

// otherProcess is the one of a and b that does not run turn tid.
func otherProcess(t *testing.T, a, b *Relay, tid string) *Relay {
	t.Helper()
	var drainer string
	Eventually(t, 30*time.Second, func() bool { drainer = a.Turn(tid).Drainer; return drainer != "" }, "turn %s to name its drainer", tid)
	switch {
	case strings.HasPrefix(drainer, a.App.Relay().WorkerID()+":"):
		return b
	case strings.HasPrefix(drainer, b.App.Relay().WorkerID()+":"):
		return a
	}
	t.Fatalf("turn %s drained by %q, neither process", tid, drainer)
	return nil
}

// R23.6 on an ACP session: the kept agent process ends (also when it lives
// in another process); the next turn starts a new one that resumes the
// conversation (session/load, R22.2) with the tool list as it is now
// (agent sessions turned off meanwhile: no relay_tool, R4.2).
func TestKillSessionACP(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, opts := startACP(t, f, nil)
	var b *Relay
	if !EmbeddedMode() {
		opts.Redis = r.Redis
		b = Start(t, opts)
	}
	s := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	mid := r.Message(s.ID, "one")
	doneTurn(t, r, mid)
	pid := f.log(t)[0].PID
	asked := r
	if b != nil {
		asked = otherProcess(t, r, b, mid) // the kept process lives in the other one
	}
	if !kill(t, asked, s.ID) {
		t.Fatal("kill of a kept ACP process: killed false")
	}
	gone(t, pid, "the kept agent process")
	if kill(t, asked, s.ID) {
		t.Fatal("a second kill: killed true")
	}
	var st map[string]any
	if c := r.Owner(http.MethodPatch, "/api/v1/settings", map[string]any{"agent_sessions": false}, &st); c != http.StatusOK {
		t.Fatalf("settings: %d %v", c, st)
	}
	if got := doneTurn(t, r, r.Message(s.ID, "two")); got != "ANSWER: two (prompt 2)" {
		t.Fatalf("the turn after the kill %q (want the conversation resumed)", got)
	}
	log := f.log(t)
	if f.count(t, "initialize") != 2 || f.count(t, "session/load") != 1 {
		t.Fatalf("%d initialize and %d session/load after the kill, want 2 and 1", f.count(t, "initialize"), f.count(t, "session/load"))
	}
	for _, e := range log {
		if e.Method == "session/load" {
			if servers, _ := json.Marshal(e.Params["mcpServers"]); string(servers) != "[]" {
				t.Fatalf("session/load after agent sessions were turned off hands %s, want no relay_tool", servers)
			}
			if e.PID == pid {
				t.Fatal("session/load in the killed process")
			}
		}
	}
}

// R23.6: an ACP turn running when the kill comes ends as stopped.
func TestKillSessionACPRunningTurn(t *testing.T) {
	t.Parallel()
	f := newACPFake(t, nil)
	r, _ := startACP(t, f, nil)
	s := r.NewSession(map[string]any{"title": "acp agent", "provider": "fakeacp"})
	mid := r.Message(s.ID, acpScript(map[string]any{"sleep_ms": 120000}))
	r.WaitTurn(mid, 30*time.Second, store.TurnRunning)
	Eventually(t, 30*time.Second, func() bool { return f.count(t, "session/prompt") == 1 }, "the prompt to reach the agent")
	pid := f.log(t)[0].PID
	if !kill(t, r, s.ID) {
		t.Fatal("kill of a running ACP turn: killed false")
	}
	if tr := waitEnded(r, mid, 30*time.Second); tr.Status != store.TurnStopped {
		t.Fatalf("the killed ACP turn ended %s (%q), want stopped", tr.Status, tr.Error)
	}
	gone(t, pid, "the agent process")
}

// groupOf is a session's group as GET /sessions/{id} shows it ("" = none).
func groupOf(t *testing.T, r *Relay, sid string) (id, name string) {
	t.Helper()
	g, _ := r.Get(sid)["group"].(map[string]any)
	if g == nil {
		return "", ""
	}
	return str(g["id"]), str(g["name"])
}

// groupIDs is GET /api/v1/groups's ids in order.
func groupIDs(t *testing.T, r *Relay) []string {
	t.Helper()
	var out struct {
		Groups []struct {
			ID string `json:"id"`
		} `json:"groups"`
	}
	if st := r.Owner(http.MethodGet, "/api/v1/groups", nil, &out); st != http.StatusOK {
		t.Fatalf("GET /groups: %d", st)
	}
	var ids []string
	for _, g := range out.Groups {
		ids = append(ids, g.ID)
	}
	return ids
}

// R23.7: PATCH /sessions/{id} moves a session by group id or name (a new
// name makes an owner's group), "" or null takes it out; PUT /groups/order
// sets GET /groups's order, the groups left out (and unnamed ones) after.
func TestGroupsByHand(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	s := r.NewSession(map[string]any{"title": "mover"})
	patch := func(body map[string]any, want int) map[string]any {
		t.Helper()
		var out map[string]any
		if st := r.Owner(http.MethodPatch, "/api/v1/sessions/"+s.ID, body, &out); st != want {
			t.Fatalf("PATCH %v: %d %v, want %d", body, st, out, want)
		}
		return out
	}
	patch(map[string]any{"group": "Research"}, http.StatusOK)
	gid, name := groupOf(t, r, s.ID)
	if !strings.HasPrefix(gid, "grp_") || name != "Research" {
		t.Fatalf("after a new name: group %q %q", gid, name)
	}
	var groups map[string][]map[string]any
	r.Owner(http.MethodGet, "/api/v1/groups", nil, &groups)
	if g := groups["groups"]; len(g) != 1 || g[0]["ownerCreated"] != true {
		t.Fatalf("the new name's group: %v, want one owner group", g)
	}
	patch(map[string]any{"group": nil}, http.StatusOK)
	if gid2, _ := groupOf(t, r, s.ID); gid2 != "" {
		t.Fatalf("after group null: in %q", gid2)
	}
	if ids := groupIDs(t, r); len(ids) != 1 || ids[0] != gid {
		t.Fatalf("the owner's group went with its last session: %v", ids)
	}
	patch(map[string]any{"group": "research"}, http.StatusOK) // by name, any case: the same group
	if gid2, _ := groupOf(t, r, s.ID); gid2 != gid {
		t.Fatalf("by name: in %q, want %q", gid2, gid)
	}
	patch(map[string]any{"group": ""}, http.StatusOK)
	if gid2, _ := groupOf(t, r, s.ID); gid2 != "" {
		t.Fatalf(`after group "": in %q`, gid2)
	}
	patch(map[string]any{"group": gid}, http.StatusOK) // by id
	if gid2, _ := groupOf(t, r, s.ID); gid2 != gid {
		t.Fatalf("by id: in %q, want %q", gid2, gid)
	}
	out := patch(map[string]any{"group": "grp_nosuch", "title": "renamed"}, http.StatusBadRequest)
	if out["code"] != "REMOTE_RELAY_UNKNOWN_GROUP" || r.Get(s.ID)["title"] != "mover" {
		t.Fatalf("an unknown id: %v (and the title must stay)", out)
	}
	patch(map[string]any{"group": 3}, http.StatusBadRequest)

	// The order.
	var a, b, c map[string]any
	r.Owner(http.MethodPost, "/api/v1/groups", map[string]any{"name": "Alpha"}, &a)
	r.Owner(http.MethodPost, "/api/v1/groups", map[string]any{"name": "Beta"}, &b)
	r.Owner(http.MethodPost, "/api/v1/groups", map[string]any{"name": "Gamma"}, &c)
	ga, gb, gc := str(a["id"]), str(b["id"]), str(c["id"])
	var put map[string]any
	if st := r.Owner(http.MethodPut, "/api/v1/groups/order", map[string]any{"ids": []string{gc, gid, ga}}, &put); st != http.StatusOK {
		t.Fatalf("PUT /groups/order: %d %v", st, put)
	}
	if got := groupIDs(t, r); strings.Join(got, ",") != strings.Join([]string{gc, gid, ga, gb}, ",") {
		t.Fatalf("order %v, want %v", got, []string{gc, gid, ga, gb})
	}
	if st := r.Owner(http.MethodPut, "/api/v1/groups/order", map[string]any{"ids": []string{ga, "grp_nosuch"}}, &put); st != http.StatusNotFound {
		t.Fatalf("PUT an unknown id: %d %v", st, put)
	}
	if st := r.Owner(http.MethodPut, "/api/v1/groups/order", map[string]any{"ids": []string{ga, ga}}, &put); st != http.StatusBadRequest {
		t.Fatalf("PUT an id twice: %d %v", st, put)
	}
	if got := groupIDs(t, r); got[0] != gc {
		t.Fatalf("a refused order changed it: %v", got)
	}
	// An unnamed group (an agent's, named by its head) comes after the ordered ones.
	head := r.NewSession(map[string]any{"title": "head"})
	if res, _ := r.InTurn(head, map[string]any{"action": "create_session", "text": "hi"}, "allow"); res["ok"] != true {
		t.Fatalf("create_session: %v", res)
	}
	got := groupIDs(t, r)
	if len(got) != 5 || got[0] != gc || got[1] != gid || got[2] != ga {
		t.Fatalf("with a group an agent made: %v", got)
	}
	unnamed := got[3]
	if unnamed == gb {
		unnamed = got[4]
	}
	if st := r.Owner(http.MethodPut, "/api/v1/groups/order", map[string]any{"ids": []string{unnamed, gb}}, &put); st != http.StatusOK {
		t.Fatalf("PUT with the unnamed group: %d %v", st, put)
	}
	if got := groupIDs(t, r); got[0] != gb || got[1] != unnamed {
		t.Fatalf("an unnamed group in ids comes after the named ones, in activity order: %v", got)
	}
}

// R23.8: openUrl in send, create_session and wait results is the session's
// console page on the relay that holds it: this relay's public URL, or a
// paired relay's own, as its hello reports it.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	const bravoURL = "http://bravo.example:8443"
	a := Start(t, Options{Config: func(c *config.Config) { c.Name = "alpha" }})
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo"; c.PublicURL = bravoURL + "/" }})
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "caller"})
	local := a.NewSession(map[string]any{"title": "local target"})
	sb := b.NewSession(map[string]any{"title": "remote target"})

	res, _ := a.InTurn(sa, map[string]any{"action": "send", "session": local.ID, "text": "hi", "wait_seconds": 0}, "")
	wantEq(t, "send's openUrl", res["openUrl"], a.URL+"/s/"+local.ID)
	res, _ = a.InTurn(sa, map[string]any{"action": "wait", "session": local.ID, "message_id": str(res["message_id"]), "wait_seconds": 20}, "")
	wantEq(t, "wait's openUrl", res["openUrl"], a.URL+"/s/"+local.ID)
	a.Owner(http.MethodPatch, "/api/v1/sessions/"+sa.ID, map[string]any{"may_create_sessions": true}, nil)
	res, _ = a.InTurn(sa, map[string]any{"action": "create_session", "text": "child", "wait_seconds": 20}, "allow")
	wantEq(t, "create_session's openUrl", res["openUrl"], a.URL+"/s/"+str(res["session"]))

	var hello map[string]any
	if st := b.do(http.MethodGet, "/peer/v1/hello", peerTokenOf(t, b), nil, &hello); st != http.StatusOK {
		t.Fatalf("hello: %d %v", st, hello)
	}
	wantEq(t, "hello's publicUrl", hello["publicUrl"], bravoURL)
	a.Message(sa.ID, "work with @bravo")
	res, _ = a.InTurn(sa, map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "hello there", "wait_seconds": 20}, "")
	if res["ok"] != true {
		t.Fatalf("send to bravo: %v", res)
	}
	wantEq(t, "a paired relay's openUrl", res["openUrl"], bravoURL+"/s/"+sb.ID)
}

// peerTokenOf makes a peer token on r.
func peerTokenOf(t *testing.T, r *Relay) string {
	t.Helper()
	var tok map[string]any
	if st := r.Owner(http.MethodPost, "/api/v1/peer-tokens", map[string]any{}, &tok); st != http.StatusCreated {
		t.Fatalf("peer token: %d %v", st, tok)
	}
	return str(tok["token"])
}

// R23.9: a session an agent on a paired relay started shows, to the owner
// of the relay that holds it, the starting relay and the starter's title
// (startedBy, and the via badge with the relay: the starter's page is not
// here, so the console links nowhere).
func TestStartedByPairedAgent(t *testing.T) {
	t.Parallel()
	a := Start(t, Options{Config: func(c *config.Config) { c.Name = "alpha" }})
	b := Start(t, Options{Config: func(c *config.Config) { c.Name = "bravo" }})
	pairRelays(t, a, b, nil)
	sa := a.NewSession(map[string]any{"title": "planner"})
	a.Owner(http.MethodPatch, "/api/v1/sessions/"+sa.ID, map[string]any{"may_create_sessions": true}, nil)
	a.Message(sa.ID, "work with @bravo")
	res, _ := a.InTurn(sa, map[string]any{"action": "create_session", "relay": "bravo", "title": "helper", "text": "hi", "wait_seconds": 20}, "allow")
	if res["ok"] != true {
		t.Fatalf("create_session on bravo: %v", res)
	}
	sid := str(res["session"])
	d := b.Get(sid)
	by, _ := d["startedBy"].(map[string]any)
	if by["relay"] != "alpha" || by["title"] != "planner" || by["session"] != sa.ID {
		t.Fatalf("startedBy on bravo: %v", d["startedBy"])
	}
	wantEq(t, "the session's via", d["via"], `via agent on alpha · "planner"`)
	var list struct {
		Sessions []map[string]any `json:"sessions"`
	}
	b.Owner(http.MethodGet, "/api/v1/sessions", nil, &list)
	for _, it := range list.Sessions {
		if it["id"] == sid {
			wantEq(t, "the list's via", it["via"], `via agent on alpha · "planner"`)
		}
	}
	// Started by an agent of this relay: the badge without a relay.
	child, _ := a.InTurn(sa, map[string]any{"action": "create_session", "title": "local", "text": "hi", "wait_seconds": 20}, "")
	wantEq(t, "a local agent's via", a.Get(str(child["session"]))["via"], `via agent · "planner"`)
}
