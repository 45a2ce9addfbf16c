package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Sessions started on a paired relay, and paired relays too old for an
// action (R7.9, R7.2, R13.3), with real relays on real HTTP over loopback.

// TestPeerCreateJoinsNoGroup (R7.9): a session an agent of another relay
// starts here joins no group: the result's group is null, no group is
// founded here, and the calling relay's stand-in conversation is never a
// group's head, a member or a session record. With group it joins the
// named group as a member.
func TestPeerCreateJoinsNoGroup(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	pairRelays(t, a, b, nil)
	var rel map[string]any
	if st := b.Owner("POST", "/api/v1/groups", map[string]any{"name": "Release 2.4"}, &rel); st != 201 {
		t.Fatalf("owner group on bravo: %d %v", st, rel)
	}
	sa := a.NewSession(map[string]any{"title": "caller", "text": "use @bravo"})
	prQuiet(t, a)
	res := prRun(t, a, sa,
		prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "first remote child", "wait_seconds": 20}),
		prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "second remote child", "wait_seconds": 20}),
		prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "grouped remote child", "group": "release 2.4", "wait_seconds": 20}))
	for i, r := range res[:2] {
		if prCode(r) != "ok" {
			t.Fatalf("create_session %d on bravo: %v", i, r)
		}
		g, ok := r["group"]
		if !ok || g != nil {
			t.Errorf("create_session %d on bravo without group: group %v (present %v), want null", i, g, ok)
		}
	}
	if prCode(res[2]) != "ok" {
		t.Fatalf("create_session with group on bravo: %v", res[2])
	}
	if g, _ := res[2]["group"].(map[string]any); g["id"] != rel["id"] || g["name"] != "Release 2.4" || g["role"] != "member" {
		t.Errorf("create_session with group on bravo: group %v, want Release 2.4 (%v) as member", res[2]["group"], rel["id"])
	}

	ctx := context.Background()
	st := b.App.Store()
	stand := "peer:alpha:" + sa.ID
	gs, err := st.Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].ID != rel["id"] {
		var desc []string
		for _, g := range gs {
			desc = append(desc, g.ID+" head="+g.Head)
		}
		t.Errorf("bravo's groups: %v, want only the owner's %v", desc, rel["id"])
	}
	for _, g := range gs {
		if strings.HasPrefix(g.Head, "peer:") {
			t.Errorf("group %s is headed by the stand-in %s", g.ID, g.Head)
		}
		ms, err := st.GroupMembers(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if strings.HasPrefix(m, "peer:") {
				t.Errorf("group %s has the stand-in %s as a member", g.ID, m)
			}
		}
		if g.ID == rel["id"] && len(ms) != 1 {
			t.Errorf("Release 2.4 has %d members, want 1 (the grouped child): %v", len(ms), ms)
		}
	}
	if _, err := st.GetSession(ctx, stand); err == nil {
		t.Errorf("the stand-in %s was stored as a session on bravo", stand)
	}
	for _, r := range res[:2] {
		id, _ := r["session"].(string)
		if g := b.Get(id)["group"]; g != nil {
			t.Errorf("bravo's session %s is in group %v, want none", id, g)
		}
	}
	// The caller's own relay founds nothing either: the children live elsewhere.
	if g := a.Get(sa.ID)["group"]; g != nil {
		t.Errorf("the caller on alpha is in group %v after starting sessions on bravo", g)
	}
}

// olderPeer puts a proxy in front of relay to that announces features in
// its hello instead of the real ones (a relay from before these actions),
// and counts the calls that reach it by action.
type olderPeer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func startOlderPeer(t *testing.T, to *Relay, version string, features []string) *olderPeer {
	t.Helper()
	u, err := url.Parse(to.URL)
	if err != nil {
		t.Fatal(err)
	}
	op := &olderPeer{calls: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/peer/v1/hello" || resp.StatusCode != http.StatusOK {
			return nil
		}
		var h map[string]any
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &h); err != nil {
			return err
		}
		h["version"], h["features"] = version, features
		out, _ := json.Marshal(h)
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
		return nil
	}
	op.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/peer/v1/call" {
			raw, _ := io.ReadAll(r.Body)
			var body struct {
				Action string `json:"action"`
			}
			_ = json.Unmarshal(raw, &body)
			op.mu.Lock()
			op.calls[body.Action]++
			op.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(op.srv.Close)
	return op
}

func (op *olderPeer) count(action string) int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.calls[action]
}

// TestPeerOlderRelayRefusals (R13.3, R7.6, R7.8, R7.9, R7.10, R7.2): a
// paired relay whose hello lacks what an action needs is refused with
// REMOTE_RELAY_UNSUPPORTED before anything is sent: read_task_output,
// update_session, send with provider (the billing switch) and create_session
// with group (the seed's sentence); relay_info there has groups null and a
// groupsNote. What it does serve still reaches it.
func TestPeerOlderRelayRefusals(t *testing.T) {
	a, b := prStartPair(t, nil, nil)
	old := startOlderPeer(t, b, "0.9.11", []string{"call", "events", "asks", "inbox", "exclude"})
	tok, _ := newPeerToken(t, b)
	var p map[string]any
	if code := a.Owner("POST", "/api/v1/relays", map[string]any{"url": old.srv.URL, "token": tok}, &p); code != 201 || p["name"] != "bravo" {
		t.Fatalf("pair the older bravo: %d %v", code, p)
	}
	var rel map[string]any
	if code := b.Owner("POST", "/api/v1/groups", map[string]any{"name": "Release 2.4"}, &rel); code != 201 {
		t.Fatalf("owner group on bravo: %d %v", code, rel)
	}
	sb := b.NewSession(map[string]any{"title": "target"})
	sa := a.NewSession(map[string]any{"title": "caller", "text": "use @bravo"})
	prQuiet(t, a)
	prQuiet(t, b)
	res := prRun(t, a, sa,
		prTool(map[string]any{"action": "read_task_output", "relay": "bravo", "session": sb.ID, "task_id": "zzzzzzzzzzzz"}),
		prTool(map[string]any{"action": "update_session", "relay": "bravo", "session": sb.ID, "title": "renamed by alpha"}),
		prTool(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "on other billing", "provider": "scripted", "wait_seconds": 5}),
		prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "grouped child", "group": "Release 2.4", "wait_seconds": 5}),
		prTool(map[string]any{"action": "relay_info", "relay": "bravo"}),
		prTool(map[string]any{"action": "create_session", "relay": "bravo", "text": "plain child", "wait_seconds": 20}),
		prTool(map[string]any{"action": "send", "relay": "bravo", "session": sb.ID, "text": "plain send", "wait_seconds": 20}))
	for i, action := range []string{"read_task_output", "update_session", "send", "create_session"} {
		r := res[i]
		if prCode(r) != "REMOTE_RELAY_UNSUPPORTED" {
			t.Errorf("%s on the older bravo: %s (%s), want REMOTE_RELAY_UNSUPPORTED", action, prCode(r), prErr(r))
			continue
		}
		if e := prErr(r); !strings.Contains(e, `"bravo"`) || !strings.Contains(e, "0.9.11") {
			t.Errorf("%s on the older bravo: the error should name the relay and its version: %q", action, e)
		}
	}
	if e := prErr(res[2]); !strings.Contains(e, "Nothing was sent.") || !strings.Contains(e, "provider") {
		t.Errorf("the billing switch on the older bravo: %q", e)
	}
	if e := prErr(res[3]); !strings.HasPrefix(e, "The target relay doesn't support groups on create_session yet: ") || !strings.HasSuffix(e, "No session was created.") {
		t.Errorf("create_session with group on the older bravo: %q", e)
	}
	info := res[4]
	if prCode(info) != "ok" {
		t.Fatalf("relay_info on the older bravo: %v", info)
	}
	if g, ok := info["groups"]; !ok || g != nil {
		t.Errorf("relay_info on the older bravo: groups %v (present %v), want null", g, ok)
	}
	if n, _ := info["groupsNote"].(string); !strings.Contains(n, "create_session") || !strings.Contains(n, "group") || !strings.Contains(n, "0.9.11") {
		t.Errorf("relay_info on the older bravo: groupsNote %q", n)
	}
	if _, ok := info["groupsTotal"]; ok {
		t.Errorf("relay_info on the older bravo: groupsTotal %v with groups null", info["groupsTotal"])
	}
	if prCode(res[5]) != "ok" || prCode(res[6]) != "ok" {
		t.Errorf("what the older bravo serves: create_session %v, send %v", res[5], res[6])
	}
	// Nothing of the refused calls reached bravo.
	for action, want := range map[string]int{"read_task_output": 0, "update_session": 0, "relay_info": 1, "create_session": 1, "send": 1} {
		if n := old.count(action); n != want {
			t.Errorf("bravo got %d %s calls, want %d (refused calls are never sent)", n, action, want)
		}
	}
	prQuiet(t, b)
	if got := b.Get(sb.ID); got["title"] != "target" || got["provider"] != "scripted" {
		t.Errorf("bravo's session changed: title %v provider %v", got["title"], got["provider"])
	}
	if n := len(b.Messages(sb.ID, "agent")); n != 1 {
		t.Errorf("bravo's session holds %d agent prompts, want 1 (the plain send)", n)
	}
	ms, err := b.App.Store().GroupMembers(context.Background(), rel["id"].(string))
	if err != nil || len(ms) != 0 {
		t.Errorf("Release 2.4 on bravo: members %v (%v), want none", ms, err)
	}
}
