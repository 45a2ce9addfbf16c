package peer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// relay is a paired relay on 127.0.0.1 answering with h.
func relay(t *testing.T, h http.HandlerFunc) Target {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return Target{Name: "alpha", URL: srv.URL, Token: "rpt_secret"}
}

func answerJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// wantError checks err is an *Error with the code and sentence.
func wantError(t *testing.T, err error, code, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want a *peer.Error", err, err)
	}
	if e.Code != code || e.Msg != msg {
		t.Fatalf("error\n %s: %s\nwant\n %s: %s", e.Code, e.Msg, code, msg)
	}
}

func TestCall(t *testing.T) {
	var got struct {
		method, path, auth, accept, ctype string
		body                              CallBody
	}
	to := relay(t, func(w http.ResponseWriter, r *http.Request) {
		got.method, got.path = r.Method, r.URL.Path
		got.auth, got.accept, got.ctype = r.Header.Get("Authorization"), r.Header.Get("Accept"), r.Header.Get("Content-Type")
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &got.body); err != nil {
			t.Errorf("body %s: %v", b, err)
		}
		answerJSON(w, http.StatusOK, map[string]any{"ok": true, "summary": "done"})
	})
	body := CallBody{Action: "list_sessions", Args: map[string]json.RawMessage{"session": json.RawMessage(`"s1"`)},
		Origin: Origin{Relay: "desk", Session: "c1", Path: []string{"desk"}}}
	env, err := NewClient().Call(context.Background(), to, body, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"ok": true, "summary": "done"}, env); diff != "" {
		t.Errorf("envelope (-want +got):\n%s", diff)
	}
	if got.method != http.MethodPost || got.path != "/peer/v1/call" {
		t.Errorf("request %s %s, want POST /peer/v1/call", got.method, got.path)
	}
	if got.auth != "Bearer rpt_secret" || got.accept != "application/json" || got.ctype != "application/json" {
		t.Errorf("headers Authorization %q, Accept %q, Content-Type %q", got.auth, got.accept, got.ctype)
	}
	if diff := cmp.Diff(body, got.body); diff != "" {
		t.Errorf("body (-sent +received):\n%s", diff)
	}
}

func TestEventsQuery(t *testing.T) {
	var q string
	to := relay(t, func(w http.ResponseWriter, r *http.Request) {
		q = r.URL.RawQuery
		if r.Header.Get("Content-Type") != "" {
			t.Errorf("a GET with a Content-Type %q", r.Header.Get("Content-Type"))
		}
		answerJSON(w, http.StatusOK, map[string]any{"events": []any{}, "cursor": "7-0", "ended": "archived"})
	})
	pe, err := NewClient().Events(context.Background(), to, "sub_1", "5-0", 2*time.Second, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if q != "after=5-0&subscription=sub_1&wait=2" {
		t.Errorf("query %q", q)
	}
	if pe.Cursor != "7-0" || pe.Ended != "archived" || len(pe.Events) != 0 {
		t.Errorf("answer %+v", pe)
	}
}

// TestErrors: what each kind of failed answer becomes, in the words the
// domain gives the agent.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		code    string
		msg     string
	}{
		{"error answer keeps its code", func(w http.ResponseWriter, _ *http.Request) {
			answerJSON(w, http.StatusConflict, map[string]any{"ok": false, "code": "REMOTE_RELAY_LOCKED", "error": "Session \"build\" is locked."})
		}, "REMOTE_RELAY_LOCKED", `Relay "alpha": Session "build" is locked.`},
		{"error answer without a code", func(w http.ResponseWriter, _ *http.Request) {
			answerJSON(w, http.StatusBadGateway, map[string]any{"error": "upstream"})
		}, CodeOffline, `Relay "alpha" answered HTTP 502. Nothing is known to have been done.`},
		{"token rejected", func(w http.ResponseWriter, _ *http.Request) {
			answerJSON(w, http.StatusUnauthorized, map[string]any{"code": "REMOTE_RELAY_AUTH", "error": "no"})
		}, CodeAuth, `Relay "alpha" rejects this relay's peer token (HTTP 401). The owner must pair it again with a new token from that relay. Nothing was done.`},
		{"no peer protocol", func(w http.ResponseWriter, _ *http.Request) {
			http.NotFound(w, nil)
		}, CodeUnsupported, `Relay "alpha" does not serve the peer protocol at /peer/v1/call (HTTP 404): it may run an older relay and need an update. Nothing was done.`},
		{"not a relay's answer", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>proxy</html>")
		}, CodeOffline, `Relay "alpha" answered with something that is not a relay's answer (HTTP 200, text/html, 18 bytes). Check the pairing's URL. Nothing is known to have been done.`},
		{"unreadable JSON", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `[1]`)
		}, CodeOffline, `Relay "alpha" answered with JSON this relay cannot read (json: cannot unmarshal array into Go value of type map[string]interface {}). Nothing is known to have been done.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := relay(t, tc.handler)
			_, err := NewClient().Call(context.Background(), to, CallBody{Action: "send"}, 5*time.Second)
			wantError(t, err, tc.code, tc.msg)
		})
	}
}

func TestTimeout(t *testing.T) {
	stop := make(chan struct{})
	to := relay(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	})
	defer close(stop)
	start := time.Now()
	_, err := NewClient().Hello(context.Background(), to, 600*time.Millisecond)
	wantError(t, err, CodeOffline, `Relay "alpha" did not answer within 1s. Nothing was done there, as far as this relay knows.`)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the request took %s with a timeout of 600ms", d)
	}
}

func TestOffline(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	to := Target{Name: "alpha", URL: srv.URL, Token: "t"}
	srv.Close() // nothing listens there now
	_, err := NewClient().Hello(context.Background(), to, 5*time.Second)
	wantError(t, err, CodeOffline, `Relay "alpha" does not answer (connection refused). Nothing was done.`)

	_, err = NewClient().Hello(context.Background(), Target{Name: "beta", URL: "http://bad host", Token: "t"}, time.Second)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeOffline || !strings.HasPrefix(e.Msg, `Relay "beta" cannot be reached: its address "http://bad host" is not usable`) {
		t.Errorf("a bad address: %v", err)
	}
}

func TestNoRedirect(t *testing.T) {
	var followed bool
	other := relay(t, func(w http.ResponseWriter, r *http.Request) { followed = true })
	to := relay(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/peer/v1/hello", http.StatusFound)
	})
	_, err := NewClient().Hello(context.Background(), to, 5*time.Second)
	if followed {
		t.Fatal("the redirect was followed: the token went elsewhere")
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeOffline {
		t.Errorf("a redirect: %v, want OFFLINE", err)
	}
}
