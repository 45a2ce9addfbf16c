package domain

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The rules of paired relays (§4.3–4.10, R10.5, §12 pairing, §13), with
// two domain fixtures linked in-process (peerlink_fixture_test.go); moved
// down from relaytest/peer_rules_test.go.

// linkPair builds alpha and bravo on one peerNet, alpha paired with bravo.
func linkPair(t *testing.T, ao, bo peerEndOptions) (*peerEnd, *peerEnd) {
	t.Helper()
	n := newPeerNet(t)
	a, b := n.relay("alpha", ao), n.relay("bravo", bo)
	a.pair(b, PairRequest{})
	return a, b
}

// TestPeerPermissionTable (R4.5, R4.8, R13.1): each action against a paired
// relay is refused with PERMISSION below its level (naming the relay, the
// action and the level) and changes nothing there; at or above it, never
// PERMISSION or LOCKED; schedules are UNSUPPORTED at every level.
func TestPeerPermissionTable(t *testing.T) {
	a, b := linkPair(t, peerEndOptions{}, peerEndOptions{})
	sa := a.newSession(NewSession{Title: "caller"})
	sb := b.newSession(NewSession{Title: "target"})
	sx := b.newSession(NewSession{Title: "throwaway"})
	first := b.prompt(sb, "first words")
	b.quiet()
	watcher := "peer:alpha:" + sa
	const missing = "zzzzzzzzzzzz"
	actions := []struct {
		action string
		level  string // R4.5: the lowest level that allows it; "" for schedules
		args   map[string]any
	}{
		{"list_relays", "none", map[string]any{}},
		{"list_questions", "none", map[string]any{}},
		{"withdraw", "none", map[string]any{"question_id": "ask_" + missing}},
		{"relay_info", "read", map[string]any{}},
		{"usage", "read", map[string]any{}},
		{"list_sessions", "read", map[string]any{}},
		{"read_session", "read", map[string]any{"session": sb}},
		{"read_task_output", "read", map[string]any{"session": sb, "task_id": missing}},
		{"wait", "read", map[string]any{"session": sb, "message_id": first, "wait_seconds": 1}},
		{"subscribe", "read", map[string]any{"sessions": []string{sb}}},
		{"list_subscriptions", "read", map[string]any{}},
		{"unsubscribe", "read", map[string]any{"subscription_id": "all"}},
		{"send", "prompt", map[string]any{"session": sb, "text": "hello from alpha", "wait_seconds": 20}},
		{"answer_question", "prompt", map[string]any{"session": sb, "question_id": "q_" + missing, "answer": "yes"}},
		{"ask", "prompt", map[string]any{"session": sb, "question": "Ship it?", "options": []string{"yes", "no"}}},
		{"create_session", "full", map[string]any{"text": "started remotely", "title": "remote child", "wait_seconds": 20}},
		{"update_session", "full", map[string]any{"session": sb, "title": "renamed by alpha"}},
		{"stop", "full", map[string]any{"session": sb}},
		{"archive", "full", map[string]any{"session": sx}},
		{"transfer_subscriptions", "full", map[string]any{"from": missing}},
		{"schedule", "", map[string]any{"text": "later", "every_minutes": 60, "session": sb}},
		{"list_schedules", "", map[string]any{}},
		{"unschedule", "", map[string]any{"schedule_id": "sch_" + missing}},
	}
	rank := map[string]int{"none": 0, "read": 1, "prompt": 2, "full": 3}
	// What must work does work, at or above its level.
	want := map[string]string{"list_relays": "ok", "list_questions": "ok",
		"relay_info": "ok", "usage": "ok", "list_sessions": "ok", "read_session": "ok", "subscribe": "ok",
		"list_subscriptions": "ok", "unsubscribe": "ok", "send": "ok", "ask": "ok",
		"create_session": "ok", "update_session": "ok", "archive": "ok",
		"withdraw": "REMOTE_RELAY_NOT_FOUND", "answer_question": "REMOTE_RELAY_NOT_FOUND"}
	for _, level := range []string{"none", "read", "prompt", "full"} {
		lv := level
		if p, err := a.r.PatchRelay(a.ctx, "bravo", RelayPatch{Permission: &lv}); err != nil || p.Permission != level {
			t.Fatalf("set permission %s: %+v %v", level, p, err)
		}
		var refused, allowed []map[string]any
		var refusedA, allowedA []int
		for i, pa := range actions {
			m := map[string]any{"action": pa.action}
			if pa.action != "list_relays" {
				m["relay"] = "bravo"
			}
			for k, v := range pa.args {
				m[k] = v
			}
			if pa.level != "" && rank[pa.level] > rank[level] {
				refused, refusedA = append(refused, actTool(m)), append(refusedA, i)
			} else {
				allowed, allowedA = append(allowed, actTool(m)), append(allowedA, i)
			}
		}
		// Below the level: refused with PERMISSION, nothing changes on bravo.
		if len(refused) > 0 {
			b.quiet()
			before := b.state(watcher)
			res := a.runAllow(sa, refused...)
			for j, i := range refusedA {
				pa := actions[i]
				if linkCode(res[j]) != "REMOTE_RELAY_PERMISSION" {
					t.Errorf("level %s, %s: got %s (%s), want REMOTE_RELAY_PERMISSION", level, pa.action, linkCode(res[j]), linkErr(res[j]))
					continue
				}
				e := linkErr(res[j])
				if !strings.Contains(e, `"bravo"`) || !strings.Contains(e, pa.action) || !strings.Contains(e, `"`+pa.level+`"`) {
					t.Errorf("level %s, %s: the error should name the relay, the action and the level it needs: %q", level, pa.action, e)
				}
			}
			if d := cmp.Diff(before, b.state(watcher)); d != "" {
				t.Errorf("level %s: refused actions changed bravo (-before +after):\n%s", level, d)
			}
		}
		// At or above the level: never PERMISSION or LOCKED; schedules are
		// UNSUPPORTED on a paired relay at every level.
		res := a.runAllow(sa, allowed...)
		for j, i := range allowedA {
			pa, got := actions[i], linkCode(res[j])
			switch {
			case pa.level == "":
				if got != "REMOTE_RELAY_UNSUPPORTED" {
					t.Errorf("level %s, %s: got %s (%s), want REMOTE_RELAY_UNSUPPORTED", level, pa.action, got, linkErr(res[j]))
				}
			case got == "REMOTE_RELAY_PERMISSION" || got == "REMOTE_RELAY_LOCKED":
				t.Errorf("level %s, %s: refused with %s: %s", level, pa.action, got, linkErr(res[j]))
			}
			if w, ok := want[pa.action]; ok && got != w {
				t.Errorf("level %s, %s: got %s (%s), want %s", level, pa.action, got, linkErr(res[j]), w)
			}
		}
	}
	// The effects of the full level arrived on bravo.
	b.quiet()
	if got := b.detail(sb)["title"]; got != "renamed by alpha" {
		t.Errorf("update_session did not rename the session on bravo: %v", got)
	}
	if x := b.detail(sx); x["archived"] != true {
		t.Errorf("archive did not archive the session on bravo: %v", x["archived"])
	}
	msgs := b.history(sb, "agent")
	if len(msgs) == 0 || !strings.HasPrefix(msgs[0].Text, `[Remote prompt from an agent on relay "alpha" · session "caller" · `) {
		t.Fatalf("R4.8: remote prompt line missing: %v", msgs)
	}
	if from := msgs[0].From; from == nil || from.Relay != "alpha" || from.Session != sa || from.Title != "caller" {
		t.Errorf("R4.8: from metadata: %+v", msgs[0])
	}
}
