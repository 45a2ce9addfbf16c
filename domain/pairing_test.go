package domain

import (
	"strings"
	"testing"

	"github.com/oar/relay/store"
)

// R4.4, R13.1a: a pairing's name or host as a word, or with a leading @; a
// name or host that is an IP address or localhost only with @.
func TestMentioned(t *testing.T) {
	cases := []struct {
		text, word string
		want       bool
	}{
		{"please work with @bravo", "bravo", true},
		{"@bravo", "bravo", true},
		{"(@bravo) too", "bravo", true},
		{"bravo, please look", "bravo", true},
		{"ask bravo", "bravo", true},
		{"Ask Bravo.", "bravo", true},
		{"ask BRAVO", "Bravo", true},
		{"ask bravo's agent", "bravo", true},
		{`{"relay":"bravo"}`, "bravo", true},
		{"bravo-2 is another relay", "bravo", false},
		{"ask bravo_2", "bravo", false},
		{"xbravo", "bravo", false},
		{"bravos", "bravo", false},
		{"bravo2", "bravo", false},
		{"bravo.example.com is a host", "bravo", false}, // a dot inside a host name is not the end of the word
		{"", "bravo", false},
		{"bravo", "", false},
		// An e-mail address is not a mention (decided in the code: a word
		// character right before the @).
		{"write to me@bravo", "bravo", false},
		{"write to me@bravo and @bravo", "bravo", true},
		// localhost and IP addresses count only with @.
		{"it runs on localhost", "localhost", false},
		{"use @localhost", "localhost", true},
		{"use @LocalHost.", "localhost", true},
		{"at 10.0.0.5 there is a relay", "10.0.0.5", false},
		{`{"relay":"10.0.0.5"}`, "10.0.0.5", false},
		{"use @10.0.0.5", "10.0.0.5", true},
		{"use @10.0.0.5.", "10.0.0.5", true},
		{"use @10.0.0.55", "10.0.0.5", false},
		{"use @110.0.0.5", "10.0.0.5", false},
		{"use @127.0.0.1:8080", "127.0.0.1", true},
		// Host names count as words, like names.
		{"deploy on build-box.example.com now", "build-box.example.com", true},
		{"Deploy on Build-Box.Example.com.", "build-box.example.com", true},
		{"deploy on build-box.example.com.au", "build-box.example.com", false},
		{"deploy on xbuild-box.example.com", "build-box.example.com", false},
		{"deploy on my-build-box.example.com", "build-box.example.com", false},
		{"@build-box.example.com", "build-box.example.com", true},
	}
	for _, c := range cases {
		if got := mentioned(c.text, c.word); got != c.want {
			t.Errorf("mentioned(%q, %q) = %v, want %v", c.text, c.word, got, c.want)
		}
	}
}

// R4.10: https, or http only to loopback and private ranges.
func TestCheckPeerURL(t *testing.T) {
	ok := []struct{ url, host string }{
		{"https://build-box.example.com", "build-box.example.com"},
		{"https://Build-Box.Example.com/", "build-box.example.com"},
		{"https://8.8.8.8", "8.8.8.8"},
		{"http://127.0.0.1", "127.0.0.1"},
		{"http://127.0.0.1:8080/", "127.0.0.1"},
		{"http://127.5.6.7", "127.5.6.7"},
		{"http://10.1.2.3", "10.1.2.3"},
		{"http://192.168.1.1", "192.168.1.1"},
		{"http://172.16.0.1", "172.16.0.1"},
		{"http://172.31.255.254", "172.31.255.254"},
		{"http://[::1]", "::1"},
		{"http://[::1]:7000", "::1"},
		{"http://[fc00::1]", "fc00::1"},
		{"http://[fd12:3456::1]", "fd12:3456::1"},
		{"http://localhost:7000", "localhost"},
		{"  https://relay.example.org/base/  ", "relay.example.org"},
	}
	for _, c := range ok {
		u, host, err := checkPeerURL(c.url)
		if err != nil {
			t.Errorf("checkPeerURL(%q): %v", c.url, err)
			continue
		}
		if host != c.host {
			t.Errorf("checkPeerURL(%q) host %q, want %q", c.url, host, c.host)
		}
		if strings.HasSuffix(u.String(), "/") {
			t.Errorf("checkPeerURL(%q) keeps a trailing slash: %q", c.url, u.String())
		}
	}
	bad := []struct{ url, says string }{
		{"http://8.8.8.8", "https://"},
		{"http://8.8.8.8:80/", "https://"},
		{"http://172.32.0.1", "https://"},
		{"http://11.0.0.1", "https://"},
		{"http://[2001:4860::8888]", "https://"},
		{"ftp://x", "http(s)"},
		{"not a url", "http(s)"},
		{"", "url is required"},
		{"https://", "http(s)"},
		{"https://user:pass@relay.example.com", "may not carry a user"},
		{"http://user:pass@127.0.0.1", "may not carry a user"},
		{"https://relay.example.com/?token=x", "may not carry"},
	}
	for _, c := range bad {
		_, _, err := checkPeerURL(c.url)
		if err == nil {
			t.Errorf("checkPeerURL(%q): accepted, want refused", c.url)
			continue
		}
		e := AsError(err)
		if e.Code != CodeInvalidInput || !strings.Contains(e.Msg, c.says) || !strings.Contains(e.Msg, "Nothing was paired.") {
			t.Errorf("checkPeerURL(%q): %s %q, want INVALID_INPUT saying %q", c.url, e.Code, e.Msg, c.says)
		}
	}
}

// R4.7's example: A's agent → B's session (path [A, B]), whose agent then
// prompts C: refused unless the owner mentioned C on A; back to A: refused.
func TestHopCheck(t *testing.T) {
	cases := []struct {
		name     string
		path     []string
		unlocked []string
		target   string
		ok       bool
	}{
		{"a chain of one relay goes anywhere", []string{"A"}, nil, "B", true},
		{"a chain of one relay goes anywhere, also locked-looking", []string{"A"}, []string{"X"}, "C", true},
		{"an empty path (a fresh chain)", nil, nil, "C", true},
		{"A→B then C, C not unlocked", []string{"A", "B"}, nil, "C", false},
		{"A→B then C, another relay unlocked", []string{"A", "B"}, []string{"D"}, "C", false},
		{"A→B then C, C unlocked on A", []string{"A", "B"}, []string{"C"}, "C", true},
		{"A→B then C, unlocked case-insensitively", []string{"A", "B"}, []string{"c"}, "C", true},
		{"A→B back to A", []string{"A", "B"}, nil, "A", false},
		{"A→B back to A, even if unlocked names A", []string{"A", "B"}, []string{"A"}, "A", false},
		{"A→B back to a, case-insensitive", []string{"A", "B"}, []string{"a"}, "a", false},
		{"A→B→C then A (C's agent prompting A)", []string{"A", "B", "C"}, []string{"C", "A"}, "A", false},
		{"A→B→C then D, D unlocked on A", []string{"A", "B", "C"}, []string{"C", "D"}, "D", true},
		{"A→B→C then D, D not unlocked", []string{"A", "B", "C"}, []string{"C"}, "D", false},
	}
	for _, c := range cases {
		e := hopCheck(store.Origin{Path: c.path, Unlocked: c.unlocked}, c.target, 2)
		if c.ok && e != nil {
			t.Errorf("%s: refused: %s", c.name, e.Msg)
		}
		if !c.ok {
			if e == nil {
				t.Errorf("%s: allowed, want HOP_LIMIT", c.name)
				continue
			}
			if e.Code != CodeHopLimit || !strings.Contains(e.Msg, c.target) || !strings.Contains(e.Msg, strings.Join(c.path, " → ")) {
				t.Errorf("%s: %s %q", c.name, e.Code, e.Msg)
			}
		}
	}
}

// The limit is configurable (limits.hops); 0 means the spec's two.
func TestHopCheckLimit(t *testing.T) {
	ab := store.Origin{Path: []string{"A", "B"}}
	abc := store.Origin{Path: []string{"A", "B", "C"}}
	if e := hopCheck(ab, "C", 0); e == nil || e.Code != CodeHopLimit {
		t.Errorf("hops 0 counts as 2: %v", e)
	}
	if e := hopCheck(ab, "C", 3); e != nil {
		t.Errorf("hops 3, path of two: %v", e)
	}
	if e := hopCheck(abc, "D", 3); e == nil || e.Code != CodeHopLimit {
		t.Errorf("hops 3, path of three: %v", e)
	}
}

// R4.5's table: the lowest level that allows each action.
func TestNeededLevel(t *testing.T) {
	want := map[string]string{
		"list_relays": "none", "list_questions": "none", "withdraw": "none",
		"relay_info": "read", "usage": "read", "list_sessions": "read", "read_session": "read", "read_task_output": "read",
		"wait": "read", "subscribe": "read", "unsubscribe": "read", "list_subscriptions": "read",
		"send": "prompt", "answer_question": "prompt",
		"create_session": "full", "update_session": "full", "stop": "full", "archive": "full", "transfer_subscriptions": "full",
	}
	for action, level := range want {
		a, e := parseArgs([]byte(`{"action":"` + action + `"}`))
		if e != nil {
			t.Fatalf("%s: %v", action, e.Msg)
		}
		if got := neededLevel(a); got != level {
			t.Errorf("neededLevel(%s) = %q, want %q", action, got, level)
		}
	}
	a, e := parseArgs([]byte(`{"action":"ask","question":"ok?","session":"s1"}`))
	if e != nil {
		t.Fatal(e.Msg)
	}
	if got := neededLevel(a); got != "prompt" {
		t.Errorf("neededLevel(ask with session) = %q, want prompt", got)
	}
	// Every action has a level, and the table covers every action but the
	// schedule actions (on this relay only) and ask.
	for _, action := range Actions() {
		a, e := parseArgs([]byte(`{"action":"` + action + `"}`))
		if e != nil {
			t.Fatalf("%s: %v", action, e.Msg)
		}
		if _, ok := levelRank[neededLevel(a)]; !ok {
			t.Errorf("%s: level %q is not a level", action, neededLevel(a))
		}
		_, listed := want[action]
		if !listed && action != "ask" && action != "schedule" && action != "list_schedules" && action != "unschedule" {
			t.Errorf("action %s is missing from the test's table", action)
		}
	}
	// Levels are ordered as R4.5 lists them.
	for i, l := range Levels {
		if levelRank[l] != i {
			t.Errorf("level %s rank %d, want %d", l, levelRank[l], i)
		}
	}
}
