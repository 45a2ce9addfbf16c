package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// An error of a store call names the operation and the ids at hand, and
// still is the client's error underneath (a closed client fails every call
// without a round trip).
func TestErrorsNameOperationAndIDs(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	s := New(rdb, "stclosed")
	ctx := context.Background()
	for _, c := range []struct {
		name, want string
		call       func() error
	}{
		{"SetOnce", "set once fired:sub_1", func() error { _, err := s.SetOnce(ctx, "fired:sub_1", time.Minute); return err }},
		{"CurrentTurn", "current turn of sess_1", func() error { _, err := s.CurrentTurn(ctx, "sess_1"); return err }},
		{"AcquireLease", "acquire lease of sess_1", func() error { _, err := s.AcquireLease(ctx, "sess_1", "w1", time.Minute); return err }},
		{"RenewLease", "renew lease of sess_1", func() error { _, err := s.RenewLease(ctx, "sess_1", "w1", time.Minute); return err }},
		{"SetGroupMember", "add session sess_1 to group grp_1", func() error { return s.SetGroupMember(ctx, "grp_1", "sess_1", true) }},
		{"Waiting", "waiting on turn turn_1", func() error { _, err := s.Waiting(ctx, "turn_1"); return err }},
		{"MarkDelivered", "mark event ev_1 delivered to sess_1", func() error { _, err := s.MarkDelivered(ctx, "sess_1", "ev_1"); return err }},
		{"DeletePairing", "delete pairing bob", func() error { _, err := s.DeletePairing(ctx, "bob"); return err }},
		{"GetSession", "get session sess_1", func() error { _, err := s.GetSession(ctx, "sess_1"); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v does not say %q", err, c.want)
			}
			if !errors.Is(err, redis.ErrClosed) {
				t.Errorf("error %v is not redis.ErrClosed underneath", err)
			}
		})
	}
}

// wrap leaves nil and the sentinels callers test for as they are.
func TestWrapKeepsSentinels(t *testing.T) {
	for _, err := range []error{nil, redis.Nil, ErrNotFound, ErrFenced} {
		if got := wrap(err, "op %s", "x"); got != err { //nolint:errorlint // the very value is the point
			t.Errorf("wrap(%v) = %v, want it as it is", err, got)
		}
	}
	base := errors.New("boom")
	if got := wrap(base, "op %s", "x"); got == nil || got.Error() != "op x: boom" || !errors.Is(got, base) {
		t.Errorf("wrap(boom) = %v", got)
	}
}
