package domain

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSessionListPreviewR23_1: the session list's item carries a one-line
// plain preview of the session's last message (R23.1), kept by the store
// when a prompt is queued and when a reply is written, not read from the
// conversation: the prompt's start while its turn waits, the reply's once
// it ended; newlines become spaces, a long text is clipped to 80 characters.
func TestSessionListPreviewR23_1(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	sid := f.session(NewSession{Title: "preview"})
	preview := func() string {
		t.Helper()
		items, _, err := f.r.SessionList(f.ctx, "active", 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.ID == sid {
				return it.Preview
			}
		}
		t.Fatalf("session %s not listed", sid)
		return ""
	}
	if got := preview(); got != "" {
		t.Fatalf("a new session's preview: %q, want none", got)
	}
	long := "first line\n\tsecond   line " + strings.Repeat("é", 500)
	f.prompt(sid, long)
	got := preview()
	if !strings.HasPrefix(got, "first line second line éé") || strings.ContainsAny(got, "\n\t") {
		t.Fatalf("queued prompt's preview: %q", got)
	}
	if n := utf8.RuneCountInString(got); n != previewMax || !strings.HasSuffix(got, "…") {
		t.Fatalf("preview of a long text: %d characters %q, want %d ending in …", n, got, previewMax)
	}
	f.run()
	if got := preview(); !strings.HasPrefix(got, "echo: first line second line") {
		t.Fatalf("after the reply, preview %q, want the reply's start", got)
	}
}

// TestPreviewLineR23_1: a machine header line is left out when text follows
// it, and a character the store's byte clip cut in two is dropped (R23.1).
func TestPreviewLineR23_1(t *testing.T) {
	cases := map[string]string{
		"[relay event · x]\nthe news":  "the news",
		"[relay event · only]":         "[relay event · only]",
		"a\r\nb\x00c":                  "a b c",
		"ok " + string([]byte{0xc3}):   "ok",
		"  ":                           "",
		agentLine("t", "m") + "\nhi\n": "hi",
	}
	for in, want := range cases {
		if got := previewLine(in); got != want {
			t.Errorf("previewLine(%q) = %q, want %q", in, got, want)
		}
	}
}
