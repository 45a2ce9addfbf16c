package relaytest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oar/relay/config"
	"github.com/oar/relay/relaytest/agentfake"
)

// The agent CLI providers (R17.1–R17.5) end to end: the real CLI, installed
// from npm (agentfake.Install), runs each turn against a fake model server on
// 127.0.0.1 that follows agentScript, and calls relay_tool on the real relay.

// agentCase is one CLI under test.
type agentCase struct {
	typ string // provider type
	// deltas: the CLI reports text as it streams (Codex reports whole messages only).
	deltas bool
	// store is the folder where the CLI keeps its conversations (for a test
	// that removes them) under the provider's HOME.
	store func(home, sid string) string
	// setup installs the CLI, starts its fake model server and returns the
	// provider's config (command, env, args) and the fake.
	setup func(t *testing.T, home string) (config.Provider, *agentfake.Server)
}

var callToolRe = regexp.MustCompile(`CALLTOOL ([0-9a-z]+)`)

// agentScript is the fake model's behaviour:
//   - a request that offers no relay_tool (a CLI's side request) gets "ok";
//   - after a tool result: "FINAL: relay answered ok=true" (or false);
//   - a prompt "CALLTOOL SID": call relay_tool read_session of SID;
//   - a prompt with SLOW: "streaming slowly." and a relay_tool call, then
//     after its result 30 chunks 400 ms apart (about 12 s);
//   - any other prompt: "ANSWER: " + the prompt's last line.
func agentScript(a agentfake.Ask) agentfake.Step {
	if !a.HasRelayTool {
		return agentfake.Step{Text: "ok"}
	}
	if a.AfterTool && strings.Contains(a.Prompt, "SLOW") {
		return agentfake.Step{Text: strings.Repeat("more text. ", 30), Chunks: 30, ChunkDelay: 400 * time.Millisecond}
	}
	if a.AfterTool {
		ok := strings.Contains(a.ToolResult, `"ok":true`) || strings.Contains(a.ToolResult, `\"ok\":true`)
		return agentfake.Step{Text: fmt.Sprintf("FINAL: relay answered ok=%v", ok), InputTokens: 20, OutputTokens: 5}
	}
	if m := callToolRe.FindStringSubmatch(a.Prompt); m != nil {
		return agentfake.Step{Text: "Let me look.", Tool: map[string]any{"action": "read_session", "relay": "this", "session": m[1]}}
	}
	if strings.Contains(a.Prompt, "SLOW") {
		// A first message (Codex reports whole messages only), a tool call,
		// then a slow stream the stop cuts.
		return agentfake.Step{Text: "streaming slowly.", Tool: map[string]any{"action": "list_sessions", "relay": "this"}}
	}
	lines := strings.Split(strings.TrimSpace(a.Prompt), "\n")
	return agentfake.Step{Text: "ANSWER: " + strings.TrimSpace(lines[len(lines)-1])}
}

func runAgentCase(t *testing.T, c agentCase) {
	home := t.TempDir()
	prov, fake := c.setup(t, home)
	defer func() {
		if t.Failed() {
			t.Logf("fake model requests:\n%s", fake.Dump())
		}
	}()
	opts := Options{Config: func(cfg *config.Config) {
		cfg.Providers = append(cfg.Providers, prov)
	}}
	r := Start(t, opts)
	target := r.NewSession(map[string]any{"title": "target"})
	a := r.NewSession(map[string]any{"title": "agent", "provider": prov.ID})

	// Turn 1: the agent calls relay_tool; the relay answers it (not the
	// CLI's permissions) and an activity line shows it.
	start := time.Now()
	mid := r.Message(a.ID, "Please CALLTOOL "+target.ID+" and report.")
	turn := r.WaitTurn(mid, 90*time.Second, "done", "error", "stopped")
	t.Logf("%s turn 1 (relay_tool call): %s", c.typ, time.Since(start).Round(time.Millisecond))
	if turn.Status != "done" {
		t.Fatalf("turn 1 ended %s: %s", turn.Status, turn.Error)
	}
	if turn.Reply != "FINAL: relay answered ok=true" {
		t.Fatalf("turn 1 reply %q, want the model's final text after an ok relay_tool result", turn.Reply)
	}
	acts := r.Messages(a.ID, "activity")
	want := "🛰️ read_session → desk session " + target.ID[:8]
	if len(acts) != 1 || acts[0]["text"] != want {
		t.Fatalf("activity lines %v, want one %q", acts, want)
	}
	sess, err := r.App.Store().GetSession(context.Background(), a.ID)
	if err != nil || sess.AgentSession == "" || sess.AgentProvider != prov.ID {
		t.Fatalf("agent conversation id not stored: %+v %v", sess, err)
	}
	firstConv := sess.AgentSession

	// Turn 2, after a relay restart, resumes the CLI's conversation: its
	// model request carries turn 1's prompt.
	r.Stop()
	opts.Redis = r.Redis
	r = Start(t, opts)
	watcher := r.Connect(target.Token, nil)
	before := len(fake.Requests())
	start = time.Now()
	mid = r.Message(a.ID, "Second prompt")
	turn = r.WaitTurn(mid, 90*time.Second, "done", "error", "stopped")
	t.Logf("%s turn 2 (resumed after a relay restart): %s", c.typ, time.Since(start).Round(time.Millisecond))
	if turn.Status != "done" || turn.Reply != "ANSWER: Second prompt" {
		t.Fatalf("turn 2 ended %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
	resumed := false
	for _, q := range fake.Requests()[before:] {
		if strings.Contains(string(q.Body), "Second prompt") && strings.Contains(string(q.Body), "CALLTOOL "+target.ID) {
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("turn 2's model request does not carry turn 1's prompt (no resume)")
	}
	if sess, _ := r.App.Store().GetSession(context.Background(), a.ID); sess.AgentSession != firstConv {
		t.Fatalf("conversation id changed on resume: %q → %q", firstConv, sess.AgentSession)
	}

	// Turn 3 streams slowly: its partial reply shows in read_session's
	// inFlight while it runs; a stop kills the CLI.
	mid = r.Message(a.ID, "SLOW please")
	var inFlight string
	Eventually(t, 60*time.Second, func() bool {
		env := watcher.MustOK(map[string]any{"action": "read_session", "relay": "this", "session": a.ID, "last": 1})
		inFlight = str(env["inFlight"])
		if c.deltas && !strings.Contains(inFlight, "more text.") { // streamed text shows as it comes
			return false
		}
		return strings.Contains(inFlight, "streaming slowly.") && fake.Streaming() > 0
	}, "partial text in inFlight while the model streams")
	abortedBefore := fake.Aborted()
	if st := r.Owner("POST", "/api/v1/sessions/"+a.ID+"/stop", nil, nil); st != http.StatusOK {
		t.Fatalf("stop: status %d", st)
	}
	stopAt := time.Now()
	turn = r.WaitTurn(mid, 15*time.Second, "done", "error", "stopped")
	if turn.Status != "stopped" {
		t.Fatalf("turn 3 ended %s, want stopped", turn.Status)
	}
	Eventually(t, 10*time.Second, func() bool { return fake.Aborted() > abortedBefore },
		"the killed CLI to drop its model stream")
	t.Logf("%s stop: turn stopped and stream dropped %s after the stop; partial %q", c.typ, time.Since(stopAt).Round(time.Millisecond), excerptT(inFlight, 60))

	// Usage counts the fake's tokens of the two finished turns.
	env := watcher.MustOK(map[string]any{"action": "usage", "relay": "this"})
	var counted map[string]any
	for _, p := range list(t, env["providers"], "providers") {
		if pm := p.(map[string]any); pm["id"] == prov.ID {
			counted = pm["counted"].(map[string]any)
		}
	}
	// Turn 1: 11+20 in, 7+5 out (two model calls); turn 2: 11 in, 7 out.
	if counted == nil || counted["turns"] != float64(2) || counted["inputTokens"] != float64(42) || counted["outputTokens"] != float64(19) {
		t.Fatalf("usage of %s: %v", prov.ID, counted)
	}
	t.Logf("%s usage: %v", c.typ, counted)

	// The CLI's own store lost the conversation: the next turn starts a
	// fresh one (the prompt says so) instead of failing every turn.
	if err := os.RemoveAll(c.store(home, a.ID)); err != nil {
		t.Fatal(err)
	}
	before = len(fake.Requests())
	mid = r.Message(a.ID, "After wipe")
	turn = r.WaitTurn(mid, 90*time.Second, "done", "error", "stopped")
	if turn.Status != "done" || turn.Reply != "ANSWER: After wipe" {
		t.Fatalf("turn after the CLI lost its conversation: %s %q: %s", turn.Status, turn.Reply, turn.Error)
	}
	fresh := false
	for _, q := range fake.Requests()[before:] {
		b := string(q.Body)
		if strings.Contains(b, "could not be resumed") && !strings.Contains(b, "Second prompt") {
			fresh = true
		}
	}
	if sess, _ := r.App.Store().GetSession(context.Background(), a.ID); !fresh || sess.AgentSession == firstConv || sess.AgentSession == "" {
		t.Fatalf("no fresh conversation after a failed resume (fresh %v, id %q → %q)", fresh, firstConv, sess.AgentSession)
	}

	// A new folder starts a fresh CLI conversation (relaunched: true).
	orch := r.NewSession(map[string]any{"title": "orchestrator"})
	sub := filepath.Join(r.Redis.Dir, "sub-"+a.ID[:8])
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// orch did not start the session: the owner allows the card (R5.2.4).
	up, _ := r.InTurn(orch, map[string]any{"action": "update_session", "session": a.ID, "cwd": sub}, "allow")
	if up["relaunched"] != true {
		t.Fatalf("update_session cwd: %v", up)
	}
	if sess, _ := r.App.Store().GetSession(context.Background(), a.ID); sess.AgentSession != "" {
		t.Fatalf("conversation id kept after a new folder: %q", sess.AgentSession)
	}
}

func excerptT(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
