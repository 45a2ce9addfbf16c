package config

import (
	"strings"
	"testing"
	"time"
)

// R25.2: timing.turn_log_every, default 5m, 0 = the default, at least 1s.
func TestTurnLogEvery(t *testing.T) {
	withHome(t)
	c, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\n")}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Timing.TurnLogEvery != 5*time.Minute {
		t.Fatalf("default turn_log_every %s, want 5m", c.Timing.TurnLogEvery)
	}
	c, err = Load(map[string]string{"config": writeFile(t, "folders: [/srv]\ntiming: {turn_log_every: 30s}\n")}, envOf(nil))
	if err != nil || c.Timing.TurnLogEvery != 30*time.Second {
		t.Fatalf("turn_log_every: 30s: %v %v", c.Timing.TurnLogEvery, err)
	}
	c, err = Load(map[string]string{"config": writeFile(t, "folders: [/srv]\ntiming: {turn_log_every: 0s}\n")}, envOf(nil))
	if err != nil || c.Timing.TurnLogEvery != 0 {
		t.Fatalf("turn_log_every: 0s is accepted and kept as 0 (the drain's default, 5m, applies): %v %v", c.Timing.TurnLogEvery, err)
	}
	for _, bad := range []string{"-1s", "500ms"} {
		_, err := Load(map[string]string{"config": writeFile(t, "folders: [/srv]\ntiming: {turn_log_every: "+bad+"}\n")}, envOf(nil))
		if err == nil || !strings.Contains(err.Error(), "timing.turn_log_every must be at least 1s") {
			t.Errorf("turn_log_every %s: err %v", bad, err)
		}
	}
}
