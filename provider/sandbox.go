package provider

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Sandbox confines the processes of one provider (R18.31): each agent
// process and each of its ACP terminals runs under bubblewrap in its own
// PID, IPC and mount namespaces, with the session's folder writable, the
// provider's RW and RO paths as configured, a fresh /tmp, the rest of the
// file system read-only and the relay's own paths (Hide) not mounted. A nil
// *Sandbox is none: commands run as they are.
type Sandbox struct {
	// Bwrap is the path of bubblewrap's binary (FindBwrap).
	Bwrap string
	// RW and RO are the provider's sandbox_rw and sandbox_ro paths.
	RW, RO []string
	// Hide are the relay's paths no agent may read: its data directory,
	// its config file and the folders where turns' MCP config files (with
	// their session tokens) and agent CLI state are written. A folder is
	// covered by an empty tmpfs, a file by /dev/null. The app sets it once,
	// after every provider was built and before the first turn.
	Hide []string
}

// FindBwrap is the bwrap binary on the relay's PATH; the error says how to
// install it (a provider with sandbox: bwrap cannot start without it).
func FindBwrap() (string, error) {
	if runtime.GOOS != "linux" {
		return "", errors.New("bwrap (bubblewrap) runs on Linux only")
	}
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return "", errors.New("bwrap is not on PATH (install bubblewrap: apt-get install bubblewrap)")
	}
	if !filepath.IsAbs(p) {
		if p, err = filepath.Abs(p); err != nil {
			return "", fmt.Errorf("bwrap: %w", err)
		}
	}
	return p, nil
}

// sandboxBind is a path of one turn mounted in its sandbox after the
// relay's paths were hidden (its MCP config file, a Gemini CLI home).
type sandboxBind struct {
	path string
	rw   bool
}

// SandboxHidden are the folders of this provider that hold other sessions'
// secrets: where its MCP config files are written.
func (e *Exec) SandboxHidden() []string { return []string{e.MCPConfigDir()} }

// SandboxHidden are the folders of this provider that hold other sessions'
// secrets and conversations: its state folder (MCP config files, Gemini CLI
// homes, Codex token totals).
func (p *CLI) SandboxHidden() []string { return []string{p.c.StateDir} }

// sandboxBinds are the files of the turn its sandbox must show: the MCP
// config files it wrote (read-only) and the session's Gemini CLI home.
func (p *CLI) sandboxBinds(t Turn, tf *turnFiles) []sandboxBind {
	var out []sandboxBind
	for _, f := range tf.paths {
		out = append(out, sandboxBind{path: f})
	}
	if p.c.Type == TypeGeminiCLI {
		out = append(out, sandboxBind{path: GeminiHome(p.c.StateDir, t.SessionID), rw: true})
	}
	return out
}
