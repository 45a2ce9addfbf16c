package app

import (
	"runtime"
	"testing"

	"github.com/oar/relay/config"
)

// R18.26: the providers' user: resolved at start. A user that does not
// exist, or a relay that is not root asked for another user, stops the
// start with one line (relay serve exits 2 on app.New's error); the relay's
// uid is injected, so the non-root case is tested without dropping root.
func TestNewUsers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("user: is Linux only")
	}
	cfg := config.Config{Providers: []config.Provider{
		{ID: "plain", Type: config.TypeExec, Command: []string{"a"}},
		{ID: "agent", Type: config.TypeACP, Command: []string{"a"}, User: "nobody"},
	}}
	us, err := newUsers(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if u := us["agent"]; u == nil || u.UID != 65534 || us["plain"] != nil {
		t.Fatalf("users: %+v", us)
	}
	if us, err := newUsers(cfg, 65534); err != nil || us["agent"] == nil {
		t.Fatalf("a relay running as nobody: %v %v", us, err)
	}
	_, err = newUsers(cfg, 1000)
	if want := `config: providers[1].user (provider "agent"): the relay runs as uid 1000, not root, so it cannot run processes as user "nobody" (uid 65534): start the relay as root, or leave user out`; err == nil || err.Error() != want {
		t.Fatalf("non-root relay: %v\nwant %s", err, want)
	}
	cfg.Providers[1].User = "no-such-user-r1826"
	_, err = newUsers(cfg, 0)
	if want := `config: providers[1].user (provider "agent"): user "no-such-user-r1826" does not exist on this machine`; err == nil || err.Error() != want {
		t.Fatalf("unknown user: %v\nwant %s", err, want)
	}
}
