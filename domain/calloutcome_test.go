package domain

import (
	"testing"

	"github.com/oar/relay/store"
)

// TestCallOutcomeR23_3: the outcome a 🛰️ line shows: "ok", with the
// result's status when it has one, or the error's code.
func TestCallOutcomeR23_3(t *testing.T) {
	cases := []struct {
		name string
		out  *result
		e    *Error
		want string
	}{
		{"no status", newResult("", "x"), nil, "ok"},
		{"replied", newResult("", "x").set("status", "replied"), nil, "ok, replied"},
		{"a turn done", newResult("", "x").set("status", store.TurnDone), nil, "ok, done"},
		{"a turn question", newResult("", "x").set("status", "question"), nil, "ok, question"},
		{"a status that is not text", newResult("", "x").set("status", map[string]any{}), nil, "ok"},
		{"no result", nil, nil, "ok"},
		{"refused", nil, Errorf(CodeForbidden, "no"), CodeForbidden},
	}
	for _, c := range cases {
		if got := callOutcome(c.out, c.e); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
