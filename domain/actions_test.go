package domain

import (
	"slices"
	"sort"
	"testing"
)

// TestActionRegistry checks the registry's entries against each other: one
// entry per name, a handler each, known levels and features, and the card
// and pairing facts consistent (R4.5, R4.6, R5.2.3, R5.3, R13.3).
func TestActionRegistry(t *testing.T) {
	names := ActionNames()
	if len(names) != len(actionByName) || len(names) != len(actionArgs) {
		t.Fatalf("%d names, %d in the index, %d argument lists: an action is registered twice", len(names), len(actionByName), len(actionArgs))
	}
	sorted := slices.Clone(names)
	sort.Strings(sorted)
	if !slices.Equal(sorted, Actions()) {
		t.Errorf("Actions() = %v, want the registry's names sorted %v", Actions(), sorted)
	}
	for _, s := range actionList {
		if s.run == nil {
			t.Errorf("%s has no handler", s.name)
		}
		if _, ok := levelRank[s.level]; !ok {
			t.Errorf("%s: level %q is not a level", s.name, s.level)
		}
		for _, f := range []string{s.feature, s.extra.feature} {
			if f != "" && !slices.Contains(PeerFeatures, f) {
				t.Errorf("%s: feature %q is not one this relay serves", s.name, f)
			}
		}
		if s.extra.arg != "" && !actionKnown[s.name][s.extra.arg] {
			t.Errorf("%s: its feature's argument %q is not one of its arguments", s.name, s.extra.arg)
		}
		if (s.relay == relayNone) != (len(s.args) == 0 || s.args[0] != "relay") {
			t.Errorf("%s: relay rule %d, arguments %v: every action but one naming no relay takes relay first", s.name, s.relay, s.args)
		}
		// What a card may guard on a paired relay is checked there first, and
		// is what the accept setting switches off (R4.6, R5.3).
		if (s.check != nil) != (s.acceptGated || s.intoSession) {
			t.Errorf("%s: check %v, accept-gated %v, into a session %v", s.name, s.check != nil, s.acceptGated, s.intoSession)
		}
		if s.write && !s.acceptGated {
			t.Errorf("%s: a write action the accept setting leaves on", s.name)
		}
		if s.prompt && (!s.write || !s.promptCard) {
			t.Errorf("%s: a prompt to another agent that is no write or whose card releases no held firing", s.name)
		}
		if s.localOnly && (s.write || s.check != nil || s.prompt) {
			t.Errorf("%s: a local-only action with facts of a paired relay", s.name)
		}
		if s.checkedLines != nil && s.check == nil {
			t.Errorf("%s: card lines from a check it never gets", s.name)
		}
		if len(s.ownerOnly) > 0 && s.refuseUnknown == "" {
			t.Errorf("%s: owner-only arguments of an action that ignores unknown ones", s.name)
		}
		for _, k := range s.ownerOnly {
			if actionKnown[s.name][k] {
				t.Errorf("%s: owner-only argument %q is one of its arguments", s.name, k)
			}
		}
	}
	if got := WaitingActions(); !slices.Equal(got, []string{"send", "create_session", "wait"}) {
		t.Errorf("WaitingActions() = %v", got)
	}
	if specOf("no_such_action") != noAction || isAction("no_such_action") || isAction("") {
		t.Error("an unknown name has facts")
	}
}

// TestArgKindsTaken checks that every argument with a kind is some action's.
func TestArgKindsTaken(t *testing.T) {
	for k := range argKinds {
		taken := false
		for _, s := range actionList {
			taken = taken || actionKnown[s.name][k]
		}
		if !taken {
			t.Errorf("argument %q has a kind but no action takes it", k)
		}
	}
	for kind := range shapeChecks {
		used := false
		for _, v := range argKinds {
			used = used || v == kind
		}
		if !used {
			t.Errorf("shape check %q serves no argument", kind)
		}
	}
}

// TestActionCallFacts checks the facts that depend on a call's arguments:
// an ask with session reaches into that session, one without concerns the
// caller's own asks (R4.2, R4.4, R4.6, R4.7, R5.3).
func TestActionCallFacts(t *testing.T) {
	parse := func(raw string) *args {
		t.Helper()
		a, e := parseArgs([]byte(raw))
		if e != nil {
			t.Fatalf("parseArgs(%s): %v", raw, e)
		}
		return a
	}
	into := parse(`{"action":"ask","question":"ok?","session":"s1"}`)
	own := parse(`{"action":"ask","question":"ok?"}`)
	list := parse(`{"action":"list_questions"}`)
	send := parse(`{"action":"send","session":"s1","text":"hi"}`)
	for _, c := range []struct {
		name string
		a    *args
		// intoSession, asksHere, ownAsks, acceptGated, checkable, promptsAgent
		want [6]bool
	}{
		{"ask with session", into, [6]bool{true, false, false, true, true, true}},
		{"ask", own, [6]bool{false, true, true, false, false, false}},
		{"list_questions", list, [6]bool{false, false, true, false, false, false}},
		{"send", send, [6]bool{false, false, false, true, true, true}},
	} {
		got := [6]bool{c.a.intoSession(), c.a.asksHere(), c.a.ownAsks(), acceptGated(c.a), checkable(c.a), promptsAgent(c.a)}
		if got != c.want {
			t.Errorf("%s: facts %v, want %v", c.name, got, c.want)
		}
	}
}
