package provider

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oar/relay/internal/testwait"
)

// execHost is a fake Host that records Partial calls.
type execHost struct {
	mu        sync.Mutex
	partials  []string
	onPartial func(string)
}

func (h *execHost) CallTool(context.Context, json.RawMessage) json.RawMessage {
	return json.RawMessage(`{"ok":false}`)
}

func (h *execHost) AskUser(context.Context, string, []string) (string, error) {
	return "", errors.New("not supported")
}

func (h *execHost) StartTask(context.Context, TaskSpec) (Task, error) {
	return nil, errors.New("not supported")
}

func (h *execHost) Partial(text string) {
	h.mu.Lock()
	h.partials = append(h.partials, text)
	f := h.onPartial
	h.mu.Unlock()
	if f != nil {
		f(text)
	}
}

func (h *execHost) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.partials...)
}

// script writes a /bin/sh script into a temp dir and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func execTurn(t *testing.T) Turn {
	return Turn{
		SessionID: "s-123",
		TurnID:    "t-1",
		Prompt:    "hello there",
		Model:     "m-big",
		Effort:    "high",
		Cwd:       t.TempDir(),
		Token:     "tok-abc",
		RelayURL:  "http://127.0.0.1:7777",
		MCPURL:    "http://127.0.0.1:7777/mcp",
	}
}

func runExec(t *testing.T, c ExecConfig, turn Turn) (Result, *execHost, error) {
	t.Helper()
	h := &execHost{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := NewExec(c).Run(ctx, turn, h)
	return res, h, err
}

func wantTurnError(t *testing.T, err error) *TurnError {
	t.Helper()
	var te *TurnError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want *TurnError", err, err)
	}
	return te
}

func TestExecInfo(t *testing.T) {
	c := ExecConfig{ID: "claude", Name: "Claude Code", Command: []string{"claude"},
		Models: []string{"a", "b"}, DefaultModel: "a", Efforts: []string{"low"}, SwitchTo: "other"}
	got := NewExec(c).Info()
	want := Info{ID: "claude", Name: "Claude Code", Type: "exec", Models: []string{"a", "b"},
		DefaultModel: "a", Efforts: []string{"low"}, SwitchTo: "other"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Info = %+v, want %+v", got, want)
	}
}

func TestExecReplyFromStdout(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := script(t, `printf 'line one\nline two\n\n'`)
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/sh", s}}, execTurn(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "line one\nline two" {
		t.Fatalf("Text = %q", res.Text)
	}
	if res.Model != "m-big" {
		t.Fatalf("Model = %q, want the turn's model", res.Model)
	}
}

func TestExecDefaultModel(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := script(t, `echo "$1"`)
	turn := execTurn(t)
	turn.Model = ""
	res, _, err := runExec(t, ExecConfig{ID: "x", DefaultModel: "m-def", Command: []string{"/bin/sh", s, "{model}"}}, turn)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "m-def" || res.Model != "m-def" {
		t.Fatalf("Text = %q, Model = %q, want the default model", res.Text, res.Model)
	}
}

func TestExecPromptOnStdin(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := script(t, `echo "args:$#"; cat`)
	turn := execTurn(t)
	turn.Prompt = "first line\nsecond {cwd} line"
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/sh", s}}, turn)
	if err != nil {
		t.Fatal(err)
	}
	if want := "args:0\nfirst line\nsecond {cwd} line"; res.Text != want {
		t.Fatalf("Text = %q, want %q", res.Text, want)
	}
}

func TestExecPromptPlaceholder(t *testing.T) {
	defer goleak.VerifyNone(t)
	// stdin must be empty (EOF at once) when {prompt} is in the arguments.
	s := script(t, `printf 'arg:%s\n' "$1"; printf 'stdin:'; cat; echo '|'`)
	turn := execTurn(t)
	turn.Prompt = "do it {session} now"
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/sh", s, "--prompt={prompt}!"}}, turn)
	if err != nil {
		t.Fatal(err)
	}
	// The substituted prompt is not substituted again.
	if want := "arg:--prompt=do it {session} now!\nstdin:|"; res.Text != want {
		t.Fatalf("Text = %q, want %q", res.Text, want)
	}
}

func TestExecPlaceholders(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := script(t, `for a in "$@"; do printf '%s\n' "$a"; done; printf 'env:%s\n' "$RELAY_MCP_CONFIG"`)
	turn := execTurn(t)
	cfgDir := t.TempDir()
	c := ExecConfig{ID: "x", ConfigDir: cfgDir, Command: []string{"/bin/sh", s,
		"{session}", "{model}", "{effort}", "{cwd}", "{mcp_config}", "m={model},e={effort}", "{unknown}", "{prompt}"}}
	res, _, err := runExec(t, c, turn)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(res.Text, "\n")
	if len(lines) != 9 {
		t.Fatalf("got %d lines: %q", len(lines), res.Text)
	}
	want := []string{"s-123", "m-big", "high", turn.Cwd}
	if !reflect.DeepEqual(lines[:4], want) {
		t.Fatalf("args = %q, want %q", lines[:4], want)
	}
	cfg := lines[4]
	if filepath.Dir(cfg) != cfgDir || !strings.Contains(filepath.Base(cfg), "s-123") || !strings.HasSuffix(cfg, ".json") {
		t.Fatalf("{mcp_config} = %q, want a per-session file in %s", cfg, cfgDir)
	}
	if lines[8] != "env:"+cfg {
		t.Fatalf("RELAY_MCP_CONFIG line %q differs from {mcp_config} %q", lines[8], cfg)
	}
	if lines[5] != "m=m-big,e=high" || lines[6] != "{unknown}" || lines[7] != "hello there" {
		t.Fatalf("args = %q", lines[5:8])
	}
}

func TestExecEnv(t *testing.T) {
	defer goleak.VerifyNone(t)
	t.Setenv("EXEC_TEST_INHERITED", "from-relay")
	s := script(t, `for v in EXEC_TEST_INHERITED EXTRA_ONE RELAY_URL RELAY_MCP_URL RELAY_SESSION_ID RELAY_TOKEN; do
  eval "printf '%s=%s\n' $v \"\$$v\""
done
[ -n "$RELAY_MCP_CONFIG" ] && echo RELAY_MCP_CONFIG=set`)
	c := ExecConfig{ID: "x", Command: []string{"/bin/sh", s},
		Env: map[string]string{"EXTRA_ONE": "extra value", "RELAY_TOKEN": "must-not-win"}}
	res, _, err := runExec(t, c, execTurn(t))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"EXEC_TEST_INHERITED=from-relay",
		"EXTRA_ONE=extra value",
		"RELAY_URL=http://127.0.0.1:7777",
		"RELAY_MCP_URL=http://127.0.0.1:7777/mcp",
		"RELAY_SESSION_ID=s-123",
		"RELAY_TOKEN=tok-abc",
		"RELAY_MCP_CONFIG=set",
	}, "\n")
	if res.Text != want {
		t.Fatalf("env:\n%s\nwant:\n%s", res.Text, want)
	}
}

func TestExecMCPConfigFile(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfgDir := filepath.Join(t.TempDir(), "not", "yet")
	s := script(t, `cat "$1"; echo; stat -c %a "$1"; echo "$1"; exit "$2"`)
	turn := execTurn(t)
	turn.MCPURL = "http://127.0.0.1:7777/mcp?a=1&b=2"
	for _, code := range []string{"0", "5"} {
		t.Run("exit"+code, func(t *testing.T) {
			h := &execHost{}
			res, err := NewExec(ExecConfig{ID: "x", ConfigDir: cfgDir,
				Command: []string{"/bin/sh", s, "{mcp_config}", code}}).Run(context.Background(), turn, h)
			out := res.Text
			if code != "0" {
				_ = wantTurnError(t, err)
				// stdout is not the reply on failure; it went to Partial.
				p := h.got()
				if len(p) == 0 {
					t.Fatal("no partial output")
				}
				out = p[len(p)-1]
			} else if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(out, "\n")
			if len(lines) != 3 {
				t.Fatalf("output %q", out)
			}
			want := `{"mcpServers":{"relay":{"type":"http","url":"http://127.0.0.1:7777/mcp?a=1&b=2","headers":{"Authorization":"Bearer tok-abc"},"timeout":3600000}}}`
			if lines[0] != want {
				t.Fatalf("config file:\n%s\nwant:\n%s", lines[0], want)
			}
			if lines[1] != "600" {
				t.Fatalf("mode = %s, want 600", lines[1])
			}
			if filepath.Dir(lines[2]) != cfgDir {
				t.Fatalf("path %q not in %q", lines[2], cfgDir)
			}
			if _, err := os.Stat(lines[2]); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("config file still there after the turn: %v", err)
			}
			left, _ := os.ReadDir(cfgDir)
			if len(left) != 0 {
				t.Fatalf("files left in ConfigDir: %v", left)
			}
		})
	}
}

func TestExecNonZeroExit(t *testing.T) {
	defer goleak.VerifyNone(t)
	cases := []struct {
		name, body string
		tail       int
		want       string
	}{
		{"tail", `echo partial reply; printf 'start-0123456789abcdefghij\n' >&2; exit 3`, 11, "exit status 3: abcdefghij"},
		{"default tail", `printf '\n  boom: it broke  \n\n' >&2; exit 1`, 0, "exit status 1: boom: it broke"},
		{"no stderr", `echo only stdout; exit 7`, 0, "exit status 7"},
		{"long stderr", `i=0; while [ $i -lt 300 ]; do printf 'xxxxxxxxxx' >&2; i=$((i+1)); done; printf END >&2; exit 2`, 0,
			"exit status 2: " + strings.Repeat("x", 1997) + "END"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := script(t, tc.body)
			_, _, err := runExec(t, ExecConfig{ID: "x", StderrTail: tc.tail, Command: []string{"/bin/sh", s}}, execTurn(t))
			te := wantTurnError(t, err)
			if te.Msg != tc.want {
				t.Fatalf("Msg = %q, want %q", te.Msg, tc.want)
			}
		})
	}
}

func TestExecCannotStart(t *testing.T) {
	defer goleak.VerifyNone(t)
	turn := execTurn(t)
	missingCwd := execTurn(t)
	missingCwd.Cwd = filepath.Join(t.TempDir(), "gone")
	cases := []struct {
		name    string
		command []string
		turn    Turn
		want    string
	}{
		{"not in PATH", []string{"relay-no-such-agent-cli", "-p"}, turn, `command "relay-no-such-agent-cli" not found`},
		{"missing path", []string{"/nonexistent/relay-agent"}, turn, `cannot start "/nonexistent/relay-agent"`},
		{"missing cwd", []string{"/bin/sh", "-c", "true"}, missingCwd, `cannot start "/bin/sh"`},
		{"no command", nil, turn, "no command configured"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, _, err := runExec(t, ExecConfig{ID: "x", ConfigDir: dir, Command: tc.command}, tc.turn)
			te := wantTurnError(t, err)
			if !strings.Contains(te.Msg, tc.want) {
				t.Fatalf("Msg = %q, want it to contain %q", te.Msg, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("files left in ConfigDir: %v", left)
			}
		})
	}
}

func TestExecPathFromEnv(t *testing.T) {
	defer goleak.VerifyNone(t)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "my-agent"), []byte("#!/bin/sh\necho found me\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"my-agent"},
		Env: map[string]string{"PATH": bin + ":/usr/bin:/bin"}}, execTurn(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "found me" {
		t.Fatalf("Text = %q", res.Text)
	}
}

func TestExecCwd(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := script(t, `pwd -P`)
	turn := execTurn(t)
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/sh", s}}, turn)
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(turn.Cwd)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != want {
		t.Fatalf("cwd = %q, want %q", res.Text, want)
	}
}

func TestExecPartial(t *testing.T) {
	defer goleak.VerifyNone(t)
	// The script prints "one" and then waits until the test has seen it
	// through Partial: this only finishes if partial output is streamed.
	gate := filepath.Join(t.TempDir(), "gate")
	s := script(t, `echo one; while [ ! -e "$GATE" ]; do sleep 0.02; done; echo two; printf three`)
	h := &execHost{onPartial: func(text string) {
		if text == "one" {
			_ = os.WriteFile(gate, nil, 0o600)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := NewExec(ExecConfig{ID: "x", Command: []string{"/bin/sh", s}, Env: map[string]string{"GATE": gate}}).Run(ctx, execTurn(t), h)
	if err != nil {
		t.Fatalf("Run: %v (partials %q)", err, h.got())
	}
	if res.Text != "one\ntwo\nthree" {
		t.Fatalf("Text = %q", res.Text)
	}
	if got, want := h.got(), []string{"one", "one\ntwo"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("partials = %q, want %q", got, want)
	}
}

// processGone reports whether pid no longer runs (gone, or a zombie waiting
// for init to reap it).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

func TestExecCancelKillsProcessGroup(t *testing.T) {
	defer goleak.VerifyNone(t)
	cases := []struct {
		name     string
		trap     string
		minDelay time.Duration
	}{
		{"sigterm", "", 0},
		// Everything ignores SIGTERM: only the SIGKILL after the grace ends it.
		{"sigkill after grace", "trap '' TERM", execTermGrace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			s := script(t, tc.trap+`
sleep 30 &
echo $! > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"
echo $$ > "$PIDFILE.sh"
echo started
wait`)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cancelled time.Time
			var once sync.Once
			h := &execHost{onPartial: func(text string) {
				if text == "started" {
					once.Do(func() { cancelled = time.Now(); cancel() })
				}
			}}
			cfgDir := t.TempDir()
			c := ExecConfig{ID: "x", ConfigDir: cfgDir, Command: []string{"/bin/sh", s}, Env: map[string]string{"PIDFILE": pidFile}}
			done := make(chan struct{})
			var err error
			go func() {
				defer close(done)
				_, err = NewExec(c).Run(ctx, execTurn(t), h)
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
			elapsed := time.Since(cancelled)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			var te *TurnError
			if errors.As(err, &te) {
				t.Fatalf("a stop must not be a TurnError: %v", err)
			}
			if elapsed < tc.minDelay || elapsed > 5*time.Second {
				t.Fatalf("Run returned %v after cancel, want between %v and 5s", elapsed, tc.minDelay)
			}
			for _, f := range []string{pidFile, pidFile + ".sh"} {
				b, rerr := os.ReadFile(f)
				if rerr != nil {
					t.Fatal(rerr)
				}
				pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
				if perr != nil {
					t.Fatal(perr)
				}
				if !testwait.Poll(2*time.Second, 10*time.Millisecond, func() bool { return processGone(pid) }) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("process %d (%s) survived the stop", pid, filepath.Base(f))
				}
			}
			if left, _ := os.ReadDir(cfgDir); len(left) != 0 {
				t.Fatalf("files left in ConfigDir: %v", left)
			}
		})
	}
}

func TestExecTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := script(t, `exec sleep 30`)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := NewExec(ExecConfig{ID: "x", Command: []string{"/bin/sh", s}}).Run(ctx, execTurn(t), &execHost{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestExecAlreadyCancelled(t *testing.T) {
	defer goleak.VerifyNone(t)
	marker := filepath.Join(t.TempDir(), "ran")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := NewExec(ExecConfig{ID: "x", Command: []string{"/bin/sh", "-c", "touch " + marker}}).Run(ctx, execTurn(t), &execHost{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the turn was already stopped")
	}
}

// A background child that keeps stdout open after the command exited must
// not hang the turn (bounded by the pipe delay).
func TestExecLingeringChildDoesNotHang(t *testing.T) {
	defer goleak.VerifyNone(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := script(t, `sleep 20 & echo $! > "$PIDFILE"; echo reply`)
	start := time.Now()
	res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/bin/sh", s}, Env: map[string]string{"PIDFILE": pidFile}}, execTurn(t))
	if b, rerr := os.ReadFile(pidFile); rerr == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "reply" {
		t.Fatalf("Text = %q", res.Text)
	}
	if d := time.Since(start); d > execPipeDelay+3*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestExecTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 5}
	for _, s := range []string{"ab", "cd", "efg", "", "h"} {
		_, _ = b.Write([]byte(s))
	}
	if got := b.String(); got != "defgh" {
		t.Fatalf("tail = %q", got)
	}
	_, _ = b.Write([]byte("0123456789"))
	if got := b.String(); got != "56789" {
		t.Fatalf("tail = %q", got)
	}
	// A cut in the middle of a rune is dropped.
	b = &tailBuffer{max: 4}
	_, _ = b.Write([]byte("xé!!!"))
	if got := b.String(); got != "!!!" {
		t.Fatalf("tail = %q", got)
	}
}
