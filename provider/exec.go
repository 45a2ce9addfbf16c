package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
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
	// Env is extra environment on top of the relay's own, which reaches the
	// agent without REDIS_URL and every RELAY_* variable (R18.1); the turn's
	// own RELAY_* variables win over both.
	Env map[string]string
	// ConfigDir is where the generated MCP config files go ("" = os.TempDir()).
	ConfigDir string
	// StderrTail is how many bytes of the end of stderr a failed turn reports (default 2000).
	StderrTail int
	// Sandbox confines the command (R18.31); nil = none.
	Sandbox *Sandbox
	// User runs the command as that OS user (R18.26); nil = the relay's own.
	User *RunAs
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
	c.Env = c.User.withEnv(c.Env)
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

	out := newPartialWriter(h)
	errTail := &tailBuffer{max: e.c.StderrTail}
	cmd, err := e.start(t, model, cfgPath, out, errTail)
	if err != nil {
		return Result{}, err
	}
	if err := e.wait(ctx, cmd, errTail); err != nil {
		return Result{}, err
	}
	return Result{Text: out.Reply(), Model: model}, nil
}

// start starts the turn's command: its placeholders filled in, its
// environment, its own process group (killed with the relay), the
// provider's user, the prompt on stdin unless an argument holds it, in the
// sandbox when there is one.
func (e *Exec) start(t Turn, model, cfgPath string, stdout, stderr io.Writer) (*exec.Cmd, error) {
	argv, promptInArgs, err := buildArgv(e.c.Command, map[string]string{
		execPromptHolder: t.Prompt,
		"{mcp_config}":   cfgPath,
		"{session}":      t.SessionID,
		"{model}":        model,
		"{effort}":       t.Effort,
		"{cwd}":          t.Cwd,
	})
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("exec provider %q: %v; nothing was run", e.c.ID, err)}
	}

	env := e.env(t, cfgPath)
	path, err := lookPath(argv[0], env)
	if err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("exec provider %q: command %q not found: %v", e.c.ID, argv[0], err)}
	}

	cmd := &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         env,
		Dir:         t.Cwd,
		SysProcAttr: e.c.User.procAttr(), // own process group, killed with the relay; the provider's user (R18.26)
		WaitDelay:   execPipeDelay,
		Stdout:      stdout,
		Stderr:      stderr,
	}
	e.c.Sandbox.wrap(cmd, t.Cwd, sandboxBind{path: cfgPath})
	if !promptInArgs {
		cmd.Stdin = strings.NewReader(t.Prompt)
	} // else nil: /dev/null
	if err := cmd.Start(); err != nil {
		return nil, &TurnError{Msg: fmt.Sprintf("exec provider %q: cannot start %q: %v", e.c.ID, argv[0], err)}
	}
	return cmd, nil
}

// wait waits for the started command's end. When ctx is done first the
// process group is terminated (unless it ended meanwhile) and ctx.Err() is
// returned, wrapped; a failed exit is exitError's.
func (e *Exec) wait(ctx context.Context, cmd *exec.Cmd, errTail *tailBuffer) error {
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
		return fmt.Errorf("exec provider %q: %w", e.c.ID, ctx.Err())
	}
	return e.exitError(werr, errTail)
}

// exitError is the *TurnError of a failed exit ("exit status N" or
// "signal: killed", and the end of stderr); nil for a clean one.
func (e *Exec) exitError(werr error, errTail *tailBuffer) error {
	if werr == nil || errors.Is(werr, exec.ErrWaitDelay) {
		return nil
	}
	var xe *exec.ExitError
	if errors.As(werr, &xe) {
		msg := xe.Error()
		if tail := errTail.String(); tail != "" {
			msg += ": " + tail
		}
		return &TurnError{Msg: msg}
	}
	return &TurnError{Msg: fmt.Sprintf("exec provider %q: %v", e.c.ID, werr)}
}

// Placeholders whose value may come from an agent or the owner; a value that
// would become a flag of its own (an argument starting with "-") is refused
// unless the command has a "--" before that argument.
var flagPlaceholders = []string{execPromptHolder, "{model}", "{effort}", "{session}", "{cwd}"}

// buildArgv substitutes the placeholders in each argument in one pass (so a
// substituted value, e.g. a prompt containing "{cwd}", is never substituted
// again). It refuses an argument that a substituted value turned into an
// option: it starts with "-" although the template did not, and no "--"
// argument comes before it.
func buildArgv(command []string, values map[string]string) (argv []string, promptInArgs bool, err error) {
	pairs := make([]string, 0, 2*len(values))
	for _, k := range []string{execPromptHolder, "{mcp_config}", "{session}", "{model}", "{effort}", "{cwd}"} {
		pairs = append(pairs, k, values[k])
	}
	rep := strings.NewReplacer(pairs...)
	argv = make([]string, len(command))
	endOfOptions := false
	for i, a := range command {
		if strings.Contains(a, execPromptHolder) {
			promptInArgs = true
		}
		argv[i] = rep.Replace(a)
		if i > 0 && !endOfOptions && strings.HasPrefix(argv[i], "-") && !strings.HasPrefix(a, "-") {
			for _, ph := range flagPlaceholders {
				if strings.HasPrefix(a, ph) {
					return nil, false, fmt.Errorf("the value of %s would start with \"-\" and become an option of the command (put \"--\" before %s in the provider's command to pass such values)", ph, ph)
				}
			}
		}
		if i > 0 && a == "--" {
			endOfOptions = true
		}
	}
	return argv, promptInArgs, nil
}

// UsesEffort reports whether the command passes the turn's effort on: an
// argument with the {effort} placeholder (R7.10).
func (e *Exec) UsesEffort() bool {
	for _, a := range e.c.Command {
		if strings.Contains(a, "{effort}") {
			return true
		}
	}
	return false
}

// ValueBecomesFlag reports whether v, put for placeholder ph ("{model}",
// "{effort}", …), would become an option of the provider's command (R18
// hardening): the domain refuses such a model or effort with
// REMOTE_RELAY_INVALID_INPUT before anything is queued.
func (e *Exec) ValueBecomesFlag(ph, v string) bool {
	if !strings.HasPrefix(v, "-") {
		return false
	}
	for i, a := range e.c.Command {
		if i > 0 && a == "--" {
			return false
		}
		if i > 0 && strings.HasPrefix(a, ph) {
			return true
		}
	}
	return false
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

// env is the relay's environment less its own secrets (AgentEnv), then the
// configured extras, then the turn's RELAY_* variables (later entries win in
// os/exec).
func (e *Exec) env(t Turn, cfgPath string) []string {
	return append(append(withExtras(AgentEnv(os.Environ()), e.c.Env),
		"RELAY_URL="+t.RelayURL,
		"RELAY_MCP_URL="+t.MCPEndpoint(),
		"RELAY_SESSION_ID="+t.SessionID,
		"RELAY_TOKEN="+t.Token,
		"RELAY_MCP_CONFIG="+cfgPath,
		"RELAY_AUTO_COMPACT_WINDOW="+itoaOrEmpty(t.AutoCompactWindow),
		"RELAY_THINKING="+t.Thinking,
		"RELAY_THINKING_DISPLAY="+t.ThinkingDisplay,
	), t.TraceEnv...) // R25.1: TRACEPARENT of the turn's span
}

// itoaOrEmpty is n in decimal, "" for 0 (not set).
func itoaOrEmpty(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// withExtras appends the provider's configured environment to env, in key
// order (later entries win in os/exec).
func withExtras(env []string, extras map[string]string) []string {
	keys := make([]string, 0, len(extras))
	for k := range extras {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extras[k])
	}
	return env
}

// AgentEnv is what an agent process inherits of the relay's environment
// (R18.1): everything but REDIS_URL and the RELAY_* variables, which carry the
// relay's own configuration (owner token, address, config path, key prefix,
// …), and TRACEPARENT / TRACESTATE (a turn gives its own, Turn.TraceEnv,
// R25.1). PATH, HOME and API keys pass through.
func AgentEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "REDIS_URL" || strings.HasPrefix(name, "RELAY_") || name == "TRACEPARENT" || name == "TRACESTATE" {
			continue
		}
		out = append(out, kv)
	}
	return out
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
	if err := e.c.User.reach(dir); err != nil { // R18.26: the user opens it by name
		return "", err
	}
	// CreateTemp opens with O_EXCL and mode 0600: no symlink games in a
	// shared temp dir, and concurrent turns of a session do not collide.
	// The relay's pid in the name lets a later start remove the files of a
	// process that died (CleanStaleMCPConfigs).
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s%d-%s-*.json", mcpConfigPrefix, os.Getpid(), safeName(t.SessionID)))
	if err != nil {
		return "", err
	}
	name := f.Name()
	err = e.c.User.own(f) // still 0600, now the agent's (R18.26)
	if err == nil {
		_, err = f.Write(MCPConfigJSON(t.MCPURL, t.Token))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", err
	}
	return name, nil
}

// MCPConfigDir is where this provider writes its MCP config files.
func (e *Exec) MCPConfigDir() string {
	if e.c.ConfigDir == "" {
		return os.TempDir()
	}
	return e.c.ConfigDir
}

// mcpConfigPrefix starts the name of every generated MCP config file.
const mcpConfigPrefix = "relay-mcp-"

// CleanStaleMCPConfigs removes the MCP config files in dir that a relay
// process which no longer runs left behind (it died mid-turn; the files hold
// session tokens). Files of live processes, and files not named by a relay,
// are left alone. It returns how many it removed.
func CleanStaleMCPConfigs(dir string) (int, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), mcpConfigPrefix)
		if !ok || !strings.HasSuffix(rest, ".json") || e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n, nil
}

// processAlive reports whether a process with this pid exists (signal 0).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
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

// Output bounds (R18.4): the reply keeps the last MaxReplyBytes of what the
// agent printed; a partial-reply write carries at most the last
// MaxPartialBytes.
const (
	MaxReplyBytes   = 1 << 20
	MaxPartialBytes = 64 << 10
)

// partialWriter collects stdout and reports the text up to its last complete
// line to Host.Partial. It keeps only the last MaxReplyBytes (compacting at
// twice that, so the work per byte stays constant) and counts what it
// dropped; a report copies at most MaxPartialBytes.
type partialWriter struct {
	h        Host
	mu       sync.Mutex
	buf      []byte
	cut      int64 // bytes dropped from the front
	reported int64 // total bytes (cut included) reported up to a newline
}

func newPartialWriter(h Host) *partialWriter { return &partialWriter{h: h} }

func (w *partialWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*MaxReplyBytes {
		drop := len(w.buf) - MaxReplyBytes
		w.cut += int64(drop)
		w.buf = append(w.buf[:0], w.buf[drop:]...)
	}
	var text string
	if i := bytes.LastIndexByte(w.buf, '\n'); i >= 0 && w.cut+int64(i)+1 > w.reported {
		w.reported = w.cut + int64(i) + 1
		text = tailText(w.buf[:i+1], MaxPartialBytes)
	}
	w.mu.Unlock()
	if text != "" && w.h != nil {
		w.h.Partial(text)
	}
	return len(p), nil
}

// Reply is the turn's reply: the output without trailing newlines, bounded
// by BoundReply.
func (w *partialWriter) Reply() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := bytes.TrimRight(w.buf, "\r\n")
	return boundReply(b, w.cut)
}

// tailText is the last max bytes of b as text, starting at a rune boundary,
// without trailing newlines.
func tailText(b []byte, max int) string {
	if len(b) > max {
		b = b[len(b)-max:]
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	return string(bytes.TrimRight(b, "\r\n"))
}

// BoundPartial keeps the last MaxPartialBytes of a partial reply.
func BoundPartial(s string) string {
	if len(s) <= MaxPartialBytes {
		return s
	}
	return tailText([]byte(s), MaxPartialBytes)
}

// BoundReply keeps the last MaxReplyBytes of a reply; a cut reply starts
// with a note of how much was cut (R18.4).
func BoundReply(s string) string {
	if len(s) <= MaxReplyBytes {
		return s
	}
	return boundReply([]byte(s), 0)
}

func boundReply(b []byte, cut int64) string {
	if len(b) > MaxReplyBytes {
		cut += int64(len(b) - MaxReplyBytes)
		b = b[len(b)-MaxReplyBytes:]
	}
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
		cut++
	}
	if cut == 0 {
		return string(b)
	}
	return fmt.Sprintf("[relay: the agent printed %d bytes; the first %d were cut and the last %d follow]\n", cut+int64(len(b)), cut, len(b)) + string(b)
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
