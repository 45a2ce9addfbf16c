// Package agentfake is the test kit for the agent CLI providers (R17): it
// installs the real CLIs from npm into a cache folder and serves fake model
// APIs (Anthropic Messages, OpenAI Responses, Gemini) on 127.0.0.1 that
// follow a script and record every request.
package agentfake

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Package is one agent CLI as npm serves it, pinned.
type Package struct {
	Name    string // @anthropic-ai/claude-code
	Version string // 2.1.332
	Bin     string // claude
}

// The pinned CLIs (measured in /work/shared/ARCHITECTURE.md).
var (
	ClaudeCode = Package{"@anthropic-ai/claude-code", "2.1.332", "claude"}
	Codex      = Package{"@openai/codex", "0.169.0", "codex"}
	GeminiCLI  = Package{"@google/gemini-cli", "0.61.0", "gemini"}
	// ClaudeCodeACP is Zed's ACP adapter over Claude Code (the Claude
	// Agent SDK inside it brings its own Claude Code).
	ClaudeCodeACP = Package{"@zed-industries/claude-code-acp", "0.16.2", "claude-code-acp"}
	// The ACP agents of R24.3 (measured offline in 2026-12).
	QwenCode       = Package{"@qwen-code/qwen-code", "0.24.4", "qwen"}
	CodexACP       = Package{"@agentclientprotocol/codex-acp", "2.6.0", "codex-acp"}
	ClaudeAgentACP = Package{"@agentclientprotocol/claude-agent-acp", "0.101.0", "claude-agent-acp"}
	CopilotCLI     = Package{"@github/copilot", "1.0.102", "copilot"}
	OpenCode       = Package{"opencode-ai", "1.18.33", "opencode"}
)

// CacheDir is where the CLIs are installed: ${XDG_CACHE_HOME:-$HOME/.cache}/relay-ci/npm.
func CacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "relay-ci", "npm")
}

// installs holds one entry per package: tests of different CLIs install in
// parallel, tests of the same CLI wait for the one install.
var (
	installMu sync.Mutex
	installs  = map[string]*installEntry{}
)

type installEntry struct {
	once sync.Once
	bin  string
	err  error
	took time.Duration
}

// Install returns the path of the package's binary, installing it with npm
// into CacheDir()/NAME@VERSION once (a file lock keeps parallel test
// processes from installing twice). When npm cannot install it the test is
// skipped with the reason, unless CI=true: then it fails.
func Install(tb testing.TB, p Package) string {
	tb.Helper()
	key := p.Name + "@" + p.Version
	installMu.Lock()
	e := installs[key]
	if e == nil {
		e = &installEntry{}
		installs[key] = e
	}
	installMu.Unlock()
	e.once.Do(func() {
		start := time.Now()
		e.bin, e.err = install(p)
		e.took = time.Since(start)
	})
	if e.err == nil {
		tb.Logf("agentfake: %s ready at %s (install or cache check took %s)", key, e.bin, e.took.Round(time.Millisecond))
		return e.bin
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("CI=true: cannot install %s with npm: %v", key, e.err)
	}
	tb.Skipf("skipped: cannot install %s with npm (no network or no npm? set CI=true to make this a failure): %v", key, e.err)
	return ""
}

func install(p Package) (string, error) {
	dir := filepath.Join(CacheDir(), safe(p.Name)+"@"+p.Version)
	bin := filepath.Join(dir, "node_modules", ".bin", p.Bin)
	marker := filepath.Join(dir, ".installed")
	if ok(bin, marker) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lf, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer func() { _ = lf.Close() }()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	if ok(bin, marker) { // another process installed it meanwhile
		return bin, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("npm not found on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error",
		"--prefix", dir, p.Name+"@"+p.Version)
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return "", fmt.Errorf("npm install %s@%s: %w: %s", p.Name, p.Version, err, out)
	}
	vctx, vcancel := context.WithTimeout(context.Background(), time.Minute)
	defer vcancel()
	v := exec.CommandContext(vctx, bin, "--version")
	v.Stdin = nil
	if vout, err := v.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s --version after install: %w: %s", bin, err, vout)
	}
	if err := os.WriteFile(marker, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", err
	}
	return bin, nil
}

func ok(bin, marker string) bool {
	if _, err := os.Stat(marker); err != nil {
		return false
	}
	fi, err := os.Stat(bin)
	return err == nil && fi.Mode()&0o111 != 0
}

func safe(name string) string {
	out := []byte(name)
	for i, c := range out {
		if c == '/' {
			out[i] = '+'
		}
	}
	return string(out)
}
