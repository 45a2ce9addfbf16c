package provider

import (
	"fmt"
	"strings"
	"testing"
)

// R18.1: the agent gets the relay's environment minus REDIS_URL and every
// RELAY_* variable of the relay's own configuration, plus the provider's env
// and its own RELAY_* variables. (Not parallel: t.Setenv.)
func TestExecEnvHidesRelaySecrets(t *testing.T) {
	t.Setenv("RELAY_OWNER_TOKEN", "owner-secret-0123456789")
	t.Setenv("REDIS_URL", "redis://10.9.9.9:6379/3")
	t.Setenv("RELAY_KEY_PREFIX", "secretprefix")
	t.Setenv("RELAY_CONFIG", "/etc/relay/secret.yaml")
	t.Setenv("ANTHROPIC_API_KEY", "sk-passes-through")
	c := ExecConfig{ID: "x", Command: []string{"/usr/bin/env"}, Env: map[string]string{"EXTRA": "from-config"}}
	res, _, err := runExec(t, c, execTurn(t))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(res.Text, "\n") {
		k, v, _ := strings.Cut(l, "=")
		vars[k] = v
	}
	for _, k := range []string{"RELAY_OWNER_TOKEN", "REDIS_URL", "RELAY_KEY_PREFIX", "RELAY_CONFIG"} {
		if v, ok := vars[k]; ok {
			t.Errorf("the agent sees %s=%s", k, v)
		}
	}
	if strings.Contains(res.Text, "owner-secret-0123456789") {
		t.Errorf("the owner token reached the agent")
	}
	want := map[string]string{"ANTHROPIC_API_KEY": "sk-passes-through", "EXTRA": "from-config", "RELAY_TOKEN": "tok-abc",
		"RELAY_SESSION_ID": "s-123", "RELAY_MCP_URL": "http://127.0.0.1:7777/mcp", "RELAY_URL": "http://127.0.0.1:7777"}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
	if vars["PATH"] == "" || vars["RELAY_MCP_CONFIG"] == "" {
		t.Errorf("PATH or RELAY_MCP_CONFIG missing: %v", vars)
	}
}

// R18.4: a 30 MB reply keeps its last 1 MiB behind a note of what was cut,
// and no partial-reply write carries more than 64 KiB.
func TestExecOutputBounded(t *testing.T) {
	t.Parallel()
	const total = 30 << 20
	// 30 MiB of "0123456789\n"-ish lines, then a recognisable last line.
	sh := script(t, fmt.Sprintf(`yes 0123456789 | head -c %d; echo; echo THE-END`, total))
	res, h, err := runExec(t, ExecConfig{ID: "x", Command: []string{sh}}, execTurn(t))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	note, body, ok := strings.Cut(res.Text, "\n")
	if !ok || !strings.HasPrefix(note, "[relay: the agent printed ") || !strings.Contains(note, " were cut and the last ") {
		t.Fatalf("reply does not start with a cut note: %.200q", res.Text)
	}
	if len(body) > MaxReplyBytes {
		t.Fatalf("reply body has %d bytes, want at most %d", len(body), MaxReplyBytes)
	}
	if !strings.HasSuffix(body, "THE-END") {
		t.Fatalf("reply does not end with the last line: %q", body[len(body)-40:])
	}
	printed := total + len("\nTHE-END") // trailing newlines are not part of the reply
	if !strings.Contains(note, fmt.Sprintf("printed %d bytes", printed)) {
		t.Errorf("note %q does not name the %d bytes printed", note, printed)
	}
	ps := h.got()
	if len(ps) == 0 {
		t.Fatal("no partial reply was reported")
	}
	for i, p := range ps {
		if len(p) > MaxPartialBytes {
			t.Fatalf("partial %d has %d bytes, want at most %d", i, len(p), MaxPartialBytes)
		}
	}
}

// The writer holds at most about twice the bound, whatever was written.
func TestPartialWriterMemoryBounded(t *testing.T) {
	t.Parallel()
	w := newPartialWriter(nil)
	chunk := []byte(strings.Repeat("abcdefghi\n", 3277)) // ~32 KiB, as os/exec copies
	for i := 0; i < 1000; i++ {
		_, _ = w.Write(chunk)
		if cap(w.buf) > 3*MaxReplyBytes {
			t.Fatalf("after %d writes the buffer holds %d bytes", i+1, cap(w.buf))
		}
	}
	if r := w.Reply(); len(r) > MaxReplyBytes+200 {
		t.Fatalf("reply %d bytes", len(r))
	}
}

func TestBoundReply(t *testing.T) {
	t.Parallel()
	if got := BoundReply("short"); got != "short" {
		t.Fatalf("short reply changed: %q", got)
	}
	long := strings.Repeat("é", MaxReplyBytes) // 2 bytes each: cut inside a rune
	got := BoundReply(long)
	note, body, _ := strings.Cut(got, "\n")
	if !strings.HasPrefix(note, fmt.Sprintf("[relay: the agent printed %d bytes; the first %d were cut", len(long), len(long)-MaxReplyBytes)) {
		t.Fatalf("note %q", note)
	}
	if len(body) != MaxReplyBytes || !strings.HasPrefix(body, "é") {
		t.Fatalf("body %d bytes, starts %q", len(body), body[:4])
	}
}

// A prompt (or model, effort) put for a placeholder may not become an option
// of the command, unless the command ends its options with "--" first.
func TestExecPlaceholderNeverBecomesAFlag(t *testing.T) {
	t.Parallel()
	turn := execTurn(t)
	turn.Prompt = "--dangerously-skip-permissions"
	_, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/echo", "-n", "{prompt}"}}, turn)
	te := wantTurnError(t, err)
	if !strings.Contains(te.Msg, "{prompt}") || !strings.Contains(te.Msg, "nothing was run") {
		t.Fatalf("turn error %q does not name the placeholder", te.Msg)
	}
	turn.Prompt = "hello"
	turn.Model = "-rf"
	_, _, err = runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/echo", "{model}"}}, turn)
	_ = wantTurnError(t, err)

	// After "--" a value is an operand.
	turn.Model = "m"
	turn.Prompt = "--dangerously-skip-permissions"
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/echo", "--", "{prompt}"}}, turn)
	if err != nil || res.Text != "-- --dangerously-skip-permissions" {
		t.Fatalf("after --: %q, %v", res.Text, err)
	}
	// A template that itself starts with "-" is the command author's option.
	res, _, err = runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/echo", "--model={model}"}}, turn)
	if err != nil || res.Text != "--model=m" {
		t.Fatalf("--model={model}: %q, %v", res.Text, err)
	}
	// In the middle of an argument a value cannot start it.
	res, _, err = runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/echo", "say {prompt}"}}, turn)
	if err != nil || res.Text != "say --dangerously-skip-permissions" {
		t.Fatalf("say {prompt}: %q, %v", res.Text, err)
	}

	e := NewExec(ExecConfig{ID: "x", Command: []string{"claude", "-p", "--model", "{model}", "{prompt}"}})
	if !e.ValueBecomesFlag("{model}", "--x") || e.ValueBecomesFlag("{model}", "opus") || e.ValueBecomesFlag("{effort}", "-x") {
		t.Fatal("ValueBecomesFlag is wrong for claude -p --model {model}")
	}
	e = NewExec(ExecConfig{ID: "x", Command: []string{"agent", "--", "{model}"}})
	if e.ValueBecomesFlag("{model}", "--x") {
		t.Fatal("a value after -- is no flag")
	}
}
