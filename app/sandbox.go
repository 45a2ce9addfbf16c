package app

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
)

// sandboxes are the providers' sandboxes (R18.31) by provider id; a
// provider without one has none here (a nil *provider.Sandbox).
type sandboxes map[string]*provider.Sandbox

// newSandboxes finds bwrap for every provider that sets sandbox: bwrap; a
// relay whose provider asks for the sandbox does not start without it (exit
// 2). A sandbox_rw or sandbox_ro path that does not exist is a warning: the
// provider's turns fail with bwrap's message until it does.
func newSandboxes(cfg config.Config, log *slog.Logger) (sandboxes, error) {
	sbs := sandboxes{}
	for i, p := range cfg.Providers {
		if !p.Sandboxed() {
			continue
		}
		bwrap, err := provider.FindBwrap()
		if err != nil {
			return nil, fmt.Errorf("config: providers[%d].sandbox is bwrap (provider %q), but %w", i, p.ID, err)
		}
		rw, err := sandboxRW(cfg, p)
		if err != nil {
			return nil, err
		}
		sbs[p.ID] = &provider.Sandbox{Bwrap: bwrap, RW: rw, RO: p.SandboxRO}
		for _, path := range append(append([]string(nil), p.SandboxRW...), p.SandboxRO...) {
			if _, err := os.Stat(path); err != nil {
				log.Warn("a sandbox path of the provider cannot be mounted: its turns fail until it exists", "provider", p.ID, "path", path, "err", err)
			}
		}
	}
	return sbs, nil
}

// sandboxRW is a provider's writable sandbox paths: its sandbox_rw and, for
// a provider of repository sessions (R24.4), the clones folder, which lies in
// the hidden data directory by default and which git in a session's worktree
// reads and writes (objects, refs, the worktree's own metadata). The folder
// is made here: bwrap cannot mount a path that does not exist.
func sandboxRW(cfg config.Config, p config.Provider) ([]string, error) {
	if !p.TakesRepos() {
		return p.SandboxRW, nil
	}
	clones, err := filepath.Abs(filepath.Join(cfg.ReposDir(), "clones"))
	if err == nil {
		err = os.MkdirAll(clones, 0o700)
	}
	if err != nil {
		return nil, fmt.Errorf("config: provider %q takes repositories in a sandbox, but its clones folder cannot be made: %w", p.ID, err)
	}
	return append(append([]string(nil), p.SandboxRW...), clones), nil
}

// hide hands every sandbox the relay's own paths, which no agent may read:
// the data directory, the config file, the files the owner token and the
// Redis password were read from (R18.36), and each provider's folders of MCP
// config files and agent state (other sessions' tokens and conversations).
func (sbs sandboxes) hide(cfg config.Config, provs []provider.Provider) {
	if len(sbs) == 0 {
		return
	}
	var hide []string
	for _, p := range append([]string{cfg.DataDir, cfg.ConfigPath}, cfg.SecretFiles...) {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			hide = append(hide, abs)
		}
	}
	for _, p := range provs {
		if h, ok := p.(interface{ SandboxHidden() []string }); ok {
			for _, d := range h.SandboxHidden() {
				if abs, err := filepath.Abs(d); err == nil {
					hide = append(hide, abs)
				}
			}
		}
	}
	for _, sb := range sbs {
		sb.Hide = hide
	}
}

// users are the providers' OS users (R18.26) by provider id; a provider
// without user: has none here (a nil *provider.RunAs: the relay's own).
type users map[string]*provider.RunAs

// newUsers resolves every provider's user: for a relay running as euid
// (os.Geteuid()). A user that does not exist, or one a relay that is not
// root cannot switch to, stops the start (exit 2) with one line.
func newUsers(cfg config.Config, euid int) (users, error) {
	us := users{}
	for i, p := range cfg.Providers {
		if p.User == "" {
			continue
		}
		u, err := provider.LookupRunAs(p.User, euid)
		if err != nil {
			return nil, fmt.Errorf("config: providers[%d].user (provider %q): %w", i, p.ID, err)
		}
		us[p.ID] = u
	}
	return us, nil
}
