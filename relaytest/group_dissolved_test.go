package relaytest

import (
	"net/http"
	"testing"
)

// R7.9 (issue 13, untested before): a group dissolved while create_session's
// card waits — between the look-up and the start — creates nothing:
// REMOTE_RELAY_UNKNOWN_GROUP, "No session was created."
func TestCreateSessionGroupDissolvedBeforeStart(t *testing.T) {
	r := Start(t, Options{})
	gid := ownerGroup(t, r, "Release 2.4")
	r.NewSession(map[string]any{"title": "member", "group": gid})
	a := r.NewSession(map[string]any{"title": "lead"})
	m := r.Connect(a.Token, nil)
	total := sessionTotal(t, m, "all")

	mid := r.Message(a.ID, Script(map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this",
		"text": "hi", "group": "Release 2.4", "wait_seconds": 0}}))
	card := r.WaitCard(a.ID)
	wantHas(t, "card lines", cardText(card), "Group: Release 2.4 ("+gid+")")
	if st := r.Owner("DELETE", "/api/v1/groups/"+gid, nil, nil); st != http.StatusOK && st != http.StatusNoContent {
		t.Fatalf("dissolve: status %d", st)
	}
	r.Decide(str(card["id"]), "allow")
	res := ToolResults(r.WaitTurn(mid, turnWait, "done").Reply)
	if len(res) != 1 || res[0]["code"] != codeUnknownGroup {
		t.Fatalf("create_session into a dissolved group: %v", res)
	}
	wantHas(t, "error", res[0]["error"], "was dissolved before the session could start", "No session was created.")
	wantEq(t, "sessions", sessionTotal(t, m, "all"), total)
}
