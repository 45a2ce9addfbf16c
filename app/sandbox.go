package app

import (
	"fmt"
	"path/filepath"

	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
)

// sandboxes are the providers' sandboxes (R18.31) by provider id; a
// provider without one has none here (a nil *provider.Sandbox).
type sandboxes map[string]*provider.Sandbox

// newSandboxes finds bwrap for every provider that sets sandbox: bwrap; a
// relay whose provider asks for the sandbox does not start without it (exit 2).
func newSandboxes(cfg config.Config) (sandboxes, error) {
	sbs := sandboxes{}
	for i, p := range cfg.Providers {
		if !p.Sandboxed() {
			continue
		}
		bwrap, err := provider.FindBwrap()
		if err != nil {
			return nil, fmt.Errorf("config: providers[%d].sandbox is bwrap (provider %q), but %v", i, p.ID, err)
		}
		sbs[p.ID] = &provider.Sandbox{Bwrap: bwrap, RW: p.SandboxRW, RO: p.SandboxRO}
	}
	return sbs, nil
}

// hide hands every sandbox the relay's own paths, which no agent may read:
// the data directory, the config file, and each provider's folders of MCP
// config files and agent state (other sessions' tokens and conversations).
func (sbs sandboxes) hide(cfg config.Config, provs []provider.Provider) {
	if len(sbs) == 0 {
		return
	}
	var hide []string
	for _, p := range []string{cfg.DataDir, cfg.ConfigPath} {
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
