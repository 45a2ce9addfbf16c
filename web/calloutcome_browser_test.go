package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/relaytest"
	"github.com/oar/relay/store"
)

// TestConversationCallOutcomeR23_3: each 🛰️ line carries its call's outcome
// once the call has its result: a turn's list_relays succeeds ("ok"), its
// answer_question with an ask's id is refused before the caller is read
// (REMOTE_RELAY_FORBIDDEN) and its read_session of an unknown session after
// (its error code). The conversation's activity messages hold them as
// `outcome`, and the console's compact lines show "· OUTCOME", the refused
// ones as failed.
func TestConversationCallOutcomeR23_3(t *testing.T) {
	r := relaytest.Start(t, relaytest.Options{})
	s := r.NewSession(map[string]any{"title": "Outcomes"})
	tool := func(args map[string]any) map[string]any { return map[string]any{"tool": args} }
	mid := r.Message(s.ID, relaytest.Script(
		tool(map[string]any{"action": "list_relays", "relay": "this"}),
		tool(map[string]any{"action": "answer_question", "relay": "this", "question_id": "ask_0123456789", "answer": "yes"}),
		tool(map[string]any{"action": "read_session", "relay": "this", "session": strings.Repeat("f", 32)}),
		map[string]any{"reply": "done"}))
	r.WaitTurn(mid, 30*time.Second, store.TurnDone)
	var reply string
	for _, m := range r.Messages(s.ID, "assistant") {
		reply += m["text"].(string) + "\n"
	}
	res := relaytest.ToolResults(reply)
	if len(res) != 3 || res[0]["ok"] != true || res[1]["code"] != "REMOTE_RELAY_FORBIDDEN" || res[2]["ok"] != false {
		t.Fatalf("tool results %v", res)
	}
	notFound, _ := res[2]["code"].(string)
	want := []string{"ok", "REMOTE_RELAY_FORBIDDEN", notFound}
	var got []string
	for _, m := range r.Messages(s.ID, "activity") {
		o, _ := m["outcome"].(string)
		got = append(got, o)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("activity outcomes %q, want %q", got, want)
	}

	b := newBrowser(t)
	b.signIn(r, "/s/"+s.ID, "#composer")
	b.waitJS("the three tool-call lines", `document.querySelectorAll("#live-msgs .act").length === 3`, 10*time.Second)
	lines := eval[[]string](b, `[...document.querySelectorAll("#live-msgs .act")].map(e => (e.classList.contains("failed") ? "failed: " : "") + e.querySelector(".what").textContent + " " + (e.querySelector(".outcome") || {textContent: ""}).textContent)`)
	wantLines := []string{"list_relays · ok", "failed: answer_question · REMOTE_RELAY_FORBIDDEN", "failed: read_session · " + notFound}
	if strings.Join(lines, "|") != strings.Join(wantLines, "|") {
		t.Errorf("compact lines %q, want %q", lines, wantLines)
	}
}
