package domain

// R18.15, R4.8: the line a prompt from an agent on this relay starts with,
// as the agent reads it and as the relay stores it; moved down from
// relaytest (the agent is an exec provider running /bin/cat, which answers
// with what it read).

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay"
	"github.com/oar/relay/config"
)

// alStored finds sid's stored prompt of role with text want and checks its
// origin: the console's badge (R4.8) names the sending agent.
func (f *fixture) alStored(sid, role, want, from string) {
	f.t.Helper()
	for _, m := range f.history(sid, role) {
		if m.Text != want {
			continue
		}
		if diff := cmp.Diff(&relay.Ref{Relay: "desk", Session: from, Title: "orchestrator", Model: "scripted-1"}, m.From); diff != "" {
			f.t.Errorf("stored %s prompt in %s: from (-want +got):\n%s", role, sid, diff)
		}
		return
	}
	f.t.Errorf("no stored %s prompt in %s with text %q: %v", role, sid, want, f.r2Texts(sid, role))
}

// R18.15: a prompt an agent sends to a session on the same relay — send,
// create_session, a schedule set by another conversation — starts with
// `[Prompt from an agent on this relay · session "TITLE" · MODEL · acting for the user]`
// and the text on the next line: the agent process reads it as its prompt,
// the relay keeps it as the stored text with the `from` of the ↗ badge (as
// R4.8's line of a paired relay, R13.1). The owner's own messages have no
// such line, nor has a schedule into the setter's own conversation.
func TestRulesAgentLinePromptFromAnAgentOnThisRelay(t *testing.T) {
	t.Parallel()
	f := newR2Fixture(t, fixtureOptions{settings: agentSessionsOn}, r2Options{providers: []config.Provider{{ID: "cat", Name: "Cat",
		Type: config.TypeExec, Command: []string{"/bin/cat"}, Models: []string{"cat-1"}}}})
	actAuto(f)
	caller := f.session(NewSession{Title: "orchestrator"})
	target := f.session(NewSession{Provider: "cat", Title: "worker"})
	line := agentLine("orchestrator", "scripted-1")
	if line != `[Prompt from an agent on this relay · session "orchestrator" · scripted-1 · acting for the user]` {
		t.Fatalf("agentLine: %q", line)
	}
	replyOf := func(env map[string]any) any {
		rp, _ := env["reply"].(map[string]any)
		return rp["text"]
	}

	// send: the agent process reads the line, then the text.
	env := f.ok(caller, map[string]any{"action": "send", "relay": "this", "session": target, "text": "please review\nserver/", "wait_seconds": 20})
	want := line + "\nplease review\nserver/"
	if diff := cmp.Diff(want, replyOf(env)); diff != "" {
		t.Fatalf("send: what the agent read (-want +got):\n%s", diff)
	}
	f.alStored(target, "agent", want, caller)

	// The owner's own message: the agent reads it as it is.
	if tr := f.actTurn(f.prompt(target, "from the owner")); tr.Reply != "from the owner" {
		t.Fatalf("owner message: the agent read %q (%s %s), want it without a line", tr.Reply, tr.Status, tr.Error)
	}
	for _, m := range f.history(target, "user") {
		if strings.HasPrefix(m.Text, "[Prompt from") || m.From != nil {
			t.Fatalf("an owner message carries an agent's line or origin: %+v", m)
		}
	}

	// create_session: the new session's first prompt carries the line.
	res, card := f.actInTurn(caller, map[string]any{"action": "create_session", "provider": "cat", "title": "fresh", "text": "start here", "wait_seconds": 20}, "allow")
	if card == nil || res["ok"] != true {
		t.Fatalf("create_session: %v (card %v)", res, card)
	}
	want = line + "\nstart here"
	if diff := cmp.Diff(want, replyOf(res)); diff != "" {
		t.Fatalf("create_session: what the agent read (-want +got):\n%s", diff)
	}
	f.alStored(res["session"].(string), "agent", want, caller)

	// A schedule the caller set into the target: the line, then the schedule's own header.
	at := f.clk.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
	id := f.schSet(caller, map[string]any{"relay": "this", "session": target, "title": "nightly", "text": "check the build", "at": at})
	want = line + "\n[relay schedule " + id + ` "nightly" · once · automated message from OAR, not from the user; it approves nothing]` + "\ncheck the build"
	f.r2Advance(3 * time.Second)
	if diff := cmp.Diff(want, f.r2Message(target, "assistant", "check the build").Text); diff != "" {
		t.Fatalf("schedule: what the agent read (-want +got):\n%s", diff)
	}
	f.alStored(target, "schedule", want, caller)

	// A schedule into the caller's own conversation is no other agent's prompt: no line.
	own := f.session(NewSession{Provider: "cat", Title: "self"})
	at = f.clk.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
	f.schSet(own, map[string]any{"relay": "this", "title": "mine", "text": "my reminder", "at": at})
	f.r2Advance(3 * time.Second)
	if txt := f.r2Message(own, "assistant", "my reminder").Text; !strings.HasPrefix(txt, "[relay schedule ") {
		t.Fatalf("own schedule: the agent read %q, want the schedule's header first", txt)
	}
}
