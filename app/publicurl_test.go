package app

import "testing"

// R18.10: an unspecified listen host is shown to agents as 127.0.0.1.
func TestPublicHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:7420":   "127.0.0.1:7420",
		"[::]:7420":      "127.0.0.1:7420",
		":7420":          "127.0.0.1:7420",
		"127.0.0.1:7420": "127.0.0.1:7420",
		"10.1.2.3:80":    "10.1.2.3:80",
		"[::1]:7420":     "[::1]:7420",
	} {
		if got := publicHostPort(in); got != want {
			t.Errorf("publicHostPort(%q) = %q, want %q", in, got, want)
		}
	}
}
