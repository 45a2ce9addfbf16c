package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// ExecConfig configures an exec provider (R11.2): an agent CLI run once per turn.
type ExecConfig struct {
	ID, Name string
	// Command is the argv. The placeholders {prompt} {mcp_config} {session}
	// {model} {effort} {cwd} are replaced inside each argument. When any
	// argument contains {prompt}, stdin is empty; otherwise the prompt is
	// written to stdin.
	Command      []string
	Models       []string
	DefaultModel string
	Efforts      []string
	SwitchTo     string
	// Env is extra environment on top of the relay's own (the RELAY_* vars win).
	Env map[string]string
	// ConfigDir is where the generated MCP config files go ("" = os.TempDir()).
	ConfigDir string
	// StderrTail is how many bytes of the end of stderr a failed turn reports (default 2000).
	StderrTail int
}

// Timing of a stop: the process group gets SIGTERM, then SIGKILL after
// execTermGrace. execPipeDelay bounds how long Run waits for stdout/stderr to
// close once the command has exited (a background grandchild may hold them).
const (
	execTermGrace     = 500 * time.Millisecond
	execPipeDelay     = 2 * time.Second
	defaultStderrTail = 2000
	execMCPTimeoutMs  = 3600000
	execPromptHolder  = "{prompt}"
)

// Exec is the exec provider. It is safe for concurrent turns.
type Exec struct {
	c ExecConfig
}

var _ Provider = (*Exec)(nil)

// NewExec returns an exec provider for c.
func NewExec(c ExecConfig) *Exec {
	c.Command = append([]string(nil), c.Command...)
	c.Models = append([]string(nil), c.Models...)
	c.Efforts = append([]string(nil), c.Efforts...)
	if c.Env != nil {
		env := make(map[string]string, len(c.Env))
		for k, v := range c.Env {
			env[k] = v
		}
		c.Env = env
	}
	if c.StderrTail <= 0 {
		c.StderrTail = defaultStderrTail
	}
	return &Exec{c: c}
}

// Info describes the provider.
func (e *Exec) Info() Info {
	return Info{
		ID:           e.c.ID,
		Name:         e.c.Name,
		Type:         "exec",
		Models:       append([]string(nil), e.c.Models...),
		DefaultModel: e.c.DefaultModel,
		Efforts:      append([]string(nil), e.c.Efforts...),
		SwitchTo:     e.c.SwitchTo,
	}
}

// Run runs the command once for the turn. Stdout is the reply; a non-zero
// exit is a *TurnError carrying the end of stderr. When ctx is done the whole
// process group is terminated and ctx.Err() is returned, wrapped.
func (e *Exec) Run(ctx context.Context, t Turn, h Host) (Result, error) {
	if len(e.c.Command) == 0 || e.c.Command[0] == "" {
		return Result{}, &TurnError{Msg: fmt.Sprintf("exec provider %q: no command configured", e.c.ID)}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("exec provider %q: %w", e.c.ID, err)
	}
	model := t.Model
	if model == "" {
		model = e.c.DefaultModel
	}

	cfgPath, err := e.writeMCPConfig(t)
	if err != nil {
		return Result{}, &TurnError{Msg: fmt.Sprintf("exec provider %q: MCP config: %v", e.c.ID, err)}
	}
	defer func() { _ = os.Remove(cfgPath) }()

	// One pass, so a substituted value (e.g. a prompt containing "{cwd}") is
	// never substituted again.
	rep := strings.NewReplacer(
		execPromptHolder, t.Prompt,
		"{mcp_config}", cfgPath,
		"{session}", t.SessionID,
		"{model}", model,
		"{effort}", t.Effort,
		"{cwd}", t.Cwd,
	)
	argv := make([]string, len(e.c.Command))
	promptInArgs := false
	for i, a := range e.c.Command {
		if strings.Contains(a, execPromptHolder) {
			promptInArgs = true
		}
		argv[i] = rep.Replace(a)
	}

	env := e.env(t, cfgPath)
	path, err := lookPath(argv[0], env)
	if err != nil {
		return Result{}, &TurnError{Msg: fmt.Sprintf("exec provider %q: command %q not found: %v", e.c.ID, argv[0], err)}
	}

	cmd := &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         env,
		Dir:         t.Cwd,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		WaitDelay:   execPipeDelay,
	}
	if !promptInArgs {
		cmd.Stdin = strings.NewReader(t.Prompt)
	} // else nil: /dev/null
	out := &partialWriter{h: h}
	errTail := &tailBuffer{max: e.c.StderrTail}
	cmd.Stdout = out
	cmd.Stderr = errTail

	if err := cmd.Start(); err != nil {
		return Result{}, &TurnError{Msg: fmt.Sprintf("exec provider %q: cannot start %q: %v", e.c.ID, argv[0], err)}
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group is the child's pid

	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	var werr error
	select {
	case werr = <-waitc:
	case <-ctx.Done():
		select {
		case <-waitc: //nolint:errcheck // it ended on its own meanwhile: already reaped, nothing to kill
		default:
			killGroup(pgid, waitc)
		}
		return Result{}, fmt.Errorf("exec provider %q: %w", e.c.ID, ctx.Err())
	}

	if werr != nil && !errors.Is(werr, exec.ErrWaitDelay) {
		var xe *exec.ExitError
		if errors.As(werr, &xe) {
			msg := xe.Error() // "exit status N" or "signal: killed"
			if tail := errTail.String(); tail != "" {
				msg += ": " + tail
			}
			return Result{}, &TurnError{Msg: msg}
		}
		return Result{}, &TurnError{Msg: fmt.Sprintf("exec provider %q: %v", e.c.ID, werr)}
	}
	return Result{Text: strings.TrimRight(out.String(), "\r\n"), Model: model}, nil
}

// killGroup stops the process group pgid: SIGTERM, a short grace, then
// SIGKILL for whatever is left, and waits for cmd.Wait (delivered on waitc).
// A process group id is not reused while any member lives, so signalling
// -pgid reaches only this command's group (or nothing: ESRCH).
func killGroup(pgid int, waitc <-chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	timer := time.NewTimer(execTermGrace)
	defer timer.Stop()
	select {
	case <-waitc: //nolint:errcheck // the exit status of a process being killed is not needed
		// The leader is gone; kill any straggler in its group (e.g. a child
		// ignoring SIGTERM). ESRCH when there is none.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	case <-timer.C:
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-waitc //nolint:errcheck // reaped; its status is not needed
}

// env is the relay's environment, then the configured extras, then the
// RELAY_* variables (later entries win in os/exec).
func (e *Exec) env(t Turn, cfgPath string) []string {
	env := os.Environ()
	keys := make([]string, 0, len(e.c.Env))
	for k := range e.c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+e.c.Env[k])
	}
	return append(env,
		"RELAY_URL="+t.RelayURL,
		"RELAY_MCP_URL="+t.MCPURL,
		"RELAY_SESSION_ID="+t.SessionID,
		"RELAY_TOKEN="+t.Token,
		"RELAY_MCP_CONFIG="+cfgPath,
	)
}

type mcpConfig struct {
	MCPServers map[string]mcpServer `json:"mcpServers"`
}

type mcpServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Timeout int64             `json:"timeout"`
}

// MCPConfigJSON is the MCP config file an exec turn gets (the shape Claude
// Code's --mcp-config takes).
// With no mcpURL (the relay offers its tool to no agent, R4.2) the file lists
// no server, so a command that names {mcp_config} still gets a valid file.
func MCPConfigJSON(mcpURL, token string) []byte {
	if mcpURL == "" {
		return []byte(`{"mcpServers":{}}`)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(mcpConfig{MCPServers: map[string]mcpServer{"relay": {
		Type:    "http",
		URL:     mcpURL,
		Headers: map[string]string{"Authorization": "Bearer " + token},
		Timeout: execMCPTimeoutMs,
	}}})
	return bytes.TrimRight(b.Bytes(), "\n")
}

// writeMCPConfig writes the turn's MCP config to a fresh 0600 file named
// after the session in ConfigDir and returns its absolute path.
func (e *Exec) writeMCPConfig(t Turn) (string, error) {
	dir := e.c.ConfigDir
	if dir == "" {
		dir = os.TempDir()
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// CreateTemp opens with O_EXCL and mode 0600: no symlink games in a
	// shared temp dir, and concurrent turns of a session do not collide.
	f, err := os.CreateTemp(dir, "relay-mcp-"+safeName(t.SessionID)+"-*.json")
	if err != nil {
		return "", err
	}
	name := f.Name()
	_, err = f.Write(MCPConfigJSON(t.MCPURL, t.Token))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", err
	}
	return name, nil
}

// safeName keeps [A-Za-z0-9_-] of s (at most 64 bytes), for file names.
func safeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 64; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "session"
	}
	return b.String()
}

// lookPath resolves name like exec.LookPath, but with the PATH of env (the
// configured Env may override it). A name with a slash is used as is
// (relative to the turn's cwd); os/exec reports it if it does not exist.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v // last one wins, as in os/exec
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if !filepath.IsAbs(p) {
			// Like exec.LookPath since Go 1.19: refuse a relative PATH hit.
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}

// partialWriter collects stdout and reports every complete line to Host.Partial.
type partialWriter struct {
	h        Host
	mu       sync.Mutex
	buf      []byte
	reported int    // bytes of buf already reported (up to a newline)
	last     string // text last reported
}

func (w *partialWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	var text string
	if i := bytes.LastIndexByte(w.buf, '\n'); i+1 > w.reported {
		w.reported = i + 1
		text = strings.TrimRight(string(w.buf[:i+1]), "\r\n")
	}
	if text == "" || text == w.last {
		w.mu.Unlock()
		return len(p), nil
	}
	w.last = text
	w.mu.Unlock()
	if w.h != nil {
		w.h.Partial(text)
	}
	return len(p), nil
}

func (w *partialWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.max {
		p = p[len(p)-b.max:]
		b.buf = append(b.buf[:0], p...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String is the kept tail, trimmed, starting at a rune boundary.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	s := b.buf
	b.mu.Unlock()
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return strings.TrimSpace(string(s))
}
