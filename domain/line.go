package domain

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oar/relay"
	"github.com/oar/relay/taskout"
)

// One line, always (R18.16): every value the relay puts into a line it writes
// itself — the prompt lines of R4.8 and R18.15, the `[relay event]` lines and
// the digest headings of R8.14, the schedule header, card lines, an answer's
// `via` — that came from an agent, a model or a paired relay goes through
// LineValue, so no agent can make a line look like one the relay wrote.

// The fields' lengths, in characters, of the values in the relay's lines.
const (
	fieldTitle   = 200 // a session's, schedule's or group's title (R18.5: a schedule title has at most 200)
	fieldModel   = 100 // a model's or provider's name, a setting's value
	fieldRelay   = 63  // a relay's name (a pairing's name has 1–63 characters)
	fieldText    = 120 // an event's TEXT (R8.14a)
	fieldExcerpt = 200 // a prompt's or question's excerpt on a card
	fieldID      = 64  // an id: question, task, subscription, session
	fieldWord    = 40  // a status or an event kind
	fieldPath    = 500 // a folder; a heading's window (quiet hours, the digests named)
)

// LineValue makes v safe for one line the relay writes (R18.16): terminal
// escape sequences (ANSI CSI such as "\x1b[31m", OSC, …), newlines, carriage
// returns, U+2028/U+2029 and every other control or bidi formatting
// character become spaces; runs of spaces become one and the ends are
// trimmed; at most max characters are kept, … when cut; and a plain double
// quote becomes a typographic one (“ and ” in turn), so a value can never
// close the quotes a line puts around it. Bytes that are not UTF-8 become
// spaces too.
func LineValue(v string, max int) string {
	w := lineWriter{max: max}
	w.b.Grow(min(len(v), 4*max+8))
	for i := 0; i < len(v); {
		if j := taskout.EscapeEnd(v, i); j > i {
			w.space, i = true, j
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		i += size
		if unicode.IsSpace(r) || lineBreaking(r) {
			w.space = true
			continue
		}
		if !w.put(r) {
			w.b.WriteString("…")
			break
		}
	}
	return w.b.String()
}

// lineWriter builds a LineValue: at most max characters, a run of spaces
// seen (space) written as one before the next character, plain double
// quotes turned typographic in turn (open) (R18.16).
type lineWriter struct {
	b           strings.Builder
	n, max      int
	space, open bool
}

// put writes r, after the one space a run before it leaves; it reports
// false, writing nothing, when the line has no room for them.
func (w *lineWriter) put(r rune) bool {
	if w.n == w.max {
		return false
	}
	if w.space && w.n > 0 {
		if w.n+1 == w.max {
			return false
		}
		w.b.WriteByte(' ')
		w.n++
	}
	w.space = false
	if r == '"' {
		r = '“'
		if w.open {
			r = '”'
		}
		w.open = !w.open
	}
	w.b.WriteRune(r)
	w.n++
	return true
}

// lineBreaking reports a character that must not reach a line: a control
// character (C0, DEL, C1), a byte that is not UTF-8, or a format character
// (bidi overrides and isolates, zero-width marks; U+2028/U+2029 are spaces
// already) that could make a line read differently from what it holds. The
// zero-width joiner stays: emoji sequences need it.
func lineBreaking(r rune) bool {
	return unicode.IsControl(r) || r == utf8.RuneError || (unicode.Is(unicode.Cf, r) && r != '\u200d')
}

// ViaAgentBadge is the `via agent · "TITLE"` badge of a session an agent
// started (R4.11), its title made safe for one line (R18.16).
// A paired relay's agent is named with its relay (R23.9: `via agent on
// RELAY · "TITLE"`; the session it started lives there, so no link). ""
// for a session no agent started.
func ViaAgentBadge(by *relay.Ref, self string) string {
	switch {
	case by == nil:
		return ""
	case by.Relay != "" && !strings.EqualFold(by.Relay, self):
		return `via agent on ` + LineValue(by.Relay, fieldRelay) + ` · "` + LineValue(by.Title, fieldTitle) + `"`
	}
	return `via agent · "` + LineValue(by.Title, fieldTitle) + `"`
}
