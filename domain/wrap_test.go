package domain

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/clock"
	"github.com/oar/relay/config"
	"github.com/oar/relay/jobs"
	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// An error from the store says what the domain was doing and with which
// ids, and still is the client's error underneath (a closed client fails
// every call without a round trip); at the edge it is INTERNAL.
func TestStoreErrorsNameOperationAndIDs(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	scripted := provider.NewScripted(provider.Info{})
	t.Cleanup(scripted.Close)
	r := New(store.New(rdb, "dtclosed"), &recordingEnqueuer{}, []provider.Provider{scripted}, Options{
		Name: "desk", Version: "test", Folders: []string{t.TempDir()},
		Settings: cfg.Settings, Timing: cfg.Timing, Limits: cfg.Limits,
		Clock:  clock.NewSim(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx := context.Background()
	const sid = "0123456789abcdef0123"
	for _, c := range []struct {
		name string
		want []string
		call func() error
	}{
		{"StopTurn", []string{"stop the turn of session 01234567: ", "current turn of " + sid + ": "}, func() error {
			_, err := r.StopTurn(ctx, sid)
			return err
		}},
		{"fanout job", []string{"fan out turn_end event ev_1 of session 01234567: ", "read subscription sub_1 of event ev_1: "}, func() error {
			return r.RunJob(ctx, jobs.TypeFanout, []byte(`{"id":"ev_1","kind":"turn_end","session":"`+sid+`","sub":"sub_1"}`))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil {
				t.Fatal("no error from a closed client")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !errors.Is(err, redis.ErrClosed) {
				t.Errorf("error %v is not redis.ErrClosed underneath", err)
			}
			if e := AsError(err); e.Code != CodeInternal || !errors.Is(e, redis.ErrClosed) {
				t.Errorf("at the edge: %s %q (keeps the cause: %v)", e.Code, e.Msg, errors.Is(e, redis.ErrClosed))
			}
		})
	}
}
