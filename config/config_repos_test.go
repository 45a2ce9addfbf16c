package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// R24.4, R24.6: repos (base_url, dir), a provider's repos and billing, read
// from the file and checked.
func TestLoadReposAndBillingR24(t *testing.T) {
	withHome(t)
	dir := t.TempDir()
	p := writeFile(t, `providers:
  - {id: claude, type: exec, command: [claude], switch_to: claude-api, billing: subscription}
  - {id: claude-api, type: exec, command: [claude], billing: api_key}
  - {id: cloud, type: exec, command: [claude], repos: true}
  - {id: claude-cloud, type: exec, command: [claude]}
repos:
  base_url: https://git.example.com
  dir: `+dir+`
`)
	c, err := Load(map[string]string{"config": p}, envOf(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	sub, _ := c.Provider("claude")
	api, _ := c.Provider("claude-api")
	if sub.Billing != BillingSubscription || api.Billing != BillingAPIKey {
		t.Errorf("billing: %q %q", sub.Billing, api.Billing)
	}
	for id, want := range map[string]bool{"claude": false, "cloud": true, "claude-cloud": true} {
		if pr, _ := c.Provider(id); pr.TakesRepos() != want {
			t.Errorf("%s takes repos: %v, want %v", id, pr.TakesRepos(), want)
		}
	}
	if c.Repos.BaseURL != "https://git.example.com" || c.ReposDir() != dir {
		t.Errorf("repos: %+v, dir %s", c.Repos, c.ReposDir())
	}
	c.Repos.Dir = ""
	if c.ReposDir() != filepath.Join(c.DataDir, "repos") {
		t.Errorf("default repos dir %s (data dir %s)", c.ReposDir(), c.DataDir)
	}

	_, err = Load(map[string]string{"config": writeFile(t, "providers:\n  - {id: x, type: exec, command: [x], billing: prepaid}\n")}, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "providers[0].billing must be subscription or api_key") {
		t.Fatalf("billing: prepaid: %v", err)
	}
	_, err = Load(map[string]string{"config": writeFile(t, "repos: {dir: relative/dir}\n")}, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "repos.dir must be an absolute path") {
		t.Fatalf("repos.dir relative: %v", err)
	}
}
