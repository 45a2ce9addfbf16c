package store

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A session's hash keeps only the fields that are not at their zero value,
// and "last" only once it is not "created" (issue 36: an idle session's eleven
// empty or zero settings and its second timestamp cost 128–192 B of Redis
// each); a save deletes a field set back, and the record reads back the same
// either way.
func TestSessionHashSparse(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	sess := &Session{ID: "s" + NewID(8), Title: "Idle session 00001", Provider: "scripted", Model: "scripted-1",
		Mode: "agent", Cwd: "/root", Token: "tok" + NewID(8), CreatedAt: now, LastActivityAt: now}
	if err := e.s.CreateSession(e.ctx, sess); err != nil {
		t.Fatal(err)
	}
	key := e.key("sess", sess.ID)
	fieldsOf := func() map[string]string {
		t.Helper()
		m, err := e.rdb.HGetAll(e.ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := map[string]string{"id": sess.ID, "title": sess.Title, "provider": "scripted", "model": "scripted-1",
		"mode": "agent", "cwd": "/root", "tokh": TokenHash(sess.Token),
		"created": strconv.FormatInt(now.UnixMilli(), 10)} // "last" too once it is not "created"
	if d := cmp.Diff(want, fieldsOf()); d != "" {
		t.Errorf("a new idle session's hash (-want +got):\n%s", d)
	}
	read := func() *Session {
		t.Helper()
		got, err := e.s.GetSession(e.ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	stored := *sess
	stored.Token, stored.TokenHash = "", TokenHash(sess.Token)
	if d := cmp.Diff(&stored, read()); d != "" {
		t.Errorf("the session read back (-want +got):\n%s", d)
	}

	// Every setting set, then each back to its zero value.
	full := stored
	full.Effort, full.Repo, full.Branch, full.GroupID = "high", "r", "main", "g1"
	full.Archived, full.ArchivedAt, full.MayCreateSessions = true, now, true
	full.AutoCompactWindow, full.ThinkingEnabled, full.ThinkingDisplay = 5, "on", "summarized"
	full.StartedBy = &Ref{Relay: "desk", Session: "s0"}
	full.LastActivityAt = now.Add(time.Second)
	if err := e.s.SaveSession(e.ctx, &full); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&full, read()); d != "" {
		t.Errorf("the session saved with every setting, read back (-want +got):\n%s", d)
	}
	if got := len(fieldsOf()); got != len(want)+12 {
		t.Errorf("the saved session has %d fields, want %d", got, len(want)+12)
	}
	if err := e.s.SaveSession(e.ctx, &stored); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, fieldsOf()); d != "" {
		t.Errorf("the session saved back at its zero settings: its hash (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&stored, read()); d != "" {
		t.Errorf("the session saved back at its zero settings, read back (-want +got):\n%s", d)
	}
}
