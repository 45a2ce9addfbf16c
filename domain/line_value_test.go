package domain

import (
	"strings"
	"testing"

	"github.com/oar/relay"
)

// R18.16: LineValue, the one function every line builder uses, value by value.
func TestLineValue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		max      int
		want     string
	}{
		{"plain", "Review: server/", 200, "Review: server/"},
		{"newline and CR", "one\ntwo\r\nthree\rfour", 200, "one two three four"},
		{"line and paragraph separators, NEL", "a\u2028b\u2029c\u0085d", 200, "a b c d"},
		{"spaces fold, ends trimmed", "  a \t\v\f b  ", 200, "a b"},
		{"ANSI colour", "\x1b[31mred\x1b[0m", 200, "red"},
		{"ANSI inside a word", "a\x1b[1mb", 200, "a b"},
		{"OSC title, C1 CSI", "x\x1b]0;title\x07y\u009b2Jz", 200, "x y z"},
		{"other controls", "a\x00b\x07c\x7fd\u0080e", 200, "a b c d e"},
		{"an APC string runs to its end", "a\u009fhidden\u009cb", 200, "a b"},
		{"bidi and zero-width", "\u202eevil\u2066x\u200by\ufeff", 200, "evil x y"},
		{"the zero-width joiner of an emoji stays", "👩\u200d💻 done", 200, "👩\u200d💻 done"},
		{"bytes that are not UTF-8", "a\xffb\xc3", 200, "a b"},
		{"quotes become typographic", `say "hi" and "bye`, 200, `say “hi” and “bye`},
		{"at its length", "abc", 3, "abc"},
		{"cut", "abcd", 3, "abc…"},
		{"cut at a space", "ab cd", 3, "ab…"},
		{"trailing spaces are not a cut", "abc   ", 3, "abc"},
		{"long", strings.Repeat("x", 10000), 120, strings.Repeat("x", 120) + "…"},
		{"characters, not bytes", strings.Repeat("ä", 130), 120, strings.Repeat("ä", 120) + "…"},
		{"empty", "\n\x1b[0m\r", 10, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := LineValue(c.in, c.max); got != c.want {
				t.Fatalf("LineValue(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
			}
		})
	}
}

// R4.11, R18.16: the via-agent badge stays one line, its title can close no
// quote, and a plain title reads as before; R23.9: a paired relay's agent is
// named with its relay; no starter, no badge.
func TestViaAgentBadge(t *testing.T) {
	for _, tc := range []struct {
		by   *relay.Ref
		want string
	}{
		{&relay.Ref{Relay: "desk", Title: "orchestrator"}, `via agent · "orchestrator"`},
		{&relay.Ref{Relay: "Desk", Title: "a\nb\"c\x1b[31m"}, `via agent · "a b“c"`},
		{&relay.Ref{Relay: "lab", Title: "planner"}, `via agent on lab · "planner"`},
		{&relay.Ref{Relay: "la\nb", Title: "x"}, `via agent on la b · "x"`},
		{nil, ""},
	} {
		if got := ViaAgentBadge(tc.by, "desk"); got != tc.want {
			t.Errorf("ViaAgentBadge(%+v) = %q, want %q", tc.by, got, tc.want)
		}
	}
}
