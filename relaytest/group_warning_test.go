package relaytest

import (
	"context"
	"testing"

	"github.com/oar/relay/store"
)

// R7.9 (issue 13, untested before): when the relay cannot put a new session
// into its group, create_session still answers with the session, group null,
// groupWarning and a note to tell the owner. The failure is made by a group
// member key of the wrong type in Redis, written while the card waits.
func TestCreateSessionGroupWarning(t *testing.T) {
	r := Start(t, Options{})
	gid := ownerGroup(t, r, "Release 2.4")
	a := r.NewSession(map[string]any{"title": "lead"})
	rdb := r.App.Redis() // the relay's own client: a real Redis or the embedded store

	mid := r.Message(a.ID, Script(map[string]any{"tool": map[string]any{"action": "create_session", "relay": "this", "text": "hi", "group": gid, "wait_seconds": 15}}))
	card := r.WaitCard(a.ID)
	// The look-up is done; now joining the group fails.
	if err := rdb.Set(context.Background(), store.KeyBase(r.Redis.Prefix)+"gm:"+gid, "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Decide(str(card["id"]), "allow")
	out := ToolResults(r.WaitTurn(mid, turnWait, "done").Reply)
	if len(out) != 1 {
		t.Fatalf("tool results: %v", out)
	}
	res := out[0]
	mustEnvOK(t, res)
	wantEq(t, "group", res["group"], nil)
	wantEq(t, "groupWarning", res["groupWarning"], "the relay could not put the session into its group")
	wantHas(t, "note", res["note"], "did not land in a group; tell the owner")
	wantHas(t, "summary", res["summary"], "(no group: the relay could not put the session into its group)")
	wantEq(t, "status", res["status"], "done")
	if g := r.Get(str(res["session"]))["group"]; g != nil {
		t.Errorf("the new session shows a group: %v", g)
	}
}
