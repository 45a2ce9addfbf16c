package webhook

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/config"
	"github.com/oar/relay/internal/testwait"
	"github.com/oar/relay/metrics"
)

// hit is one request a test listener received.
type hit struct {
	header http.Header
	body   string
}

// listener is a real HTTP server on 127.0.0.1 that answers each request
// with the status answer gives it and hands it to the test.
func listener(t *testing.T, answer func(n int) int) (*httptest.Server, chan hit) {
	t.Helper()
	hits := make(chan hit, 16)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		n++
		code := answer(n)
		mu.Unlock()
		w.WriteHeader(code)
		hits <- hit{header: r.Header.Clone(), body: string(b)}
	}))
	t.Cleanup(srv.Close)
	return srv, hits
}

// recv is the next request the listener got; none within 15 s fails the test.
func recv(t *testing.T, hits chan hit) hit {
	t.Helper()
	select {
	case h := <-hits:
		return h
	case <-time.After(15 * time.Second):
		t.Fatal("the webhook got no request")
		return hit{}
	}
}

// counted reads relay_notify_webhook_total{result} from the metrics' registry.
func counted(t *testing.T, m *metrics.Metrics, result string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "relay_notify_webhook_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// waitCount waits until the counter reaches want (the delivery's last step).
func waitCount(t *testing.T, m *metrics.Metrics, result string, want float64) {
	t.Helper()
	if !testwait.Poll(15*time.Second, 5*time.Millisecond, func() bool { return counted(t, m, result) >= want }) {
		t.Fatalf("relay_notify_webhook_total{result=%q} = %v, want %v", result, counted(t, m, result), want)
	}
}

func notice(event string) relay.OwnerNotice {
	return relay.OwnerNotice{At: time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC), Event: event, Session: "s123", Title: "build · ünïcode",
		Heading: relay.NoticeHeading(event, "build · ünïcode"), Text: "create_session: a new session", OpenURL: "http://127.0.0.1:7420/s/s123"}
}

// TestWebhookRetriedUntilDelivered (R23.10): a webhook that fails twice gets
// the notification on the third try, as JSON with the spec's keys; the
// metric counts two retries and one delivery; a webhook that does not list
// the event gets nothing.
func TestWebhookRetriedUntilDelivered(t *testing.T) {
	srv, hits := listener(t, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	other, otherHits := listener(t, func(int) int { return http.StatusOK })
	m := metrics.New()
	s := New(Options{Relay: "desk", Hooks: []config.Webhook{{URL: other.URL, Events: []string{"reply"}, Format: "json"},
		{URL: srv.URL + "/hook", Events: []string{"card", "ask"}, Format: "json"}}, Count: m.WebhookResult, Backoff: time.Millisecond})
	defer s.Close()
	s.Notice(notice(relay.NoticeCard))
	var last hit
	for range 3 {
		last = recv(t, hits)
	}
	waitCount(t, m, Delivered, 1)
	if got := counted(t, m, Retry); got != 2 {
		t.Errorf("retries counted: %v, want 2", got)
	}
	if got := counted(t, m, Failed); got != 0 {
		t.Errorf("failures counted: %v, want 0", got)
	}
	if ct := last.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	want := `{"event":"card","relay":"desk","session":{"id":"s123","title":"build · ünïcode"},"text":"create_session: a new session","openUrl":"http://127.0.0.1:7420/s/s123","at":"2026-12-06T18:00:00Z"}`
	if last.body != want {
		t.Errorf("body\n got %s\nwant %s", last.body, want)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(last.body), &keys); err != nil || len(keys) != 6 {
		t.Errorf("body keys: %v %v", keys, err)
	}
	select {
	case h := <-otherHits:
		t.Errorf("a webhook that lists only reply got a card: %s", h.body)
	default:
	}
}

// TestWebhookNtfy (R23.10): format ntfy sends the text as the body with the
// Title (RFC 2047 when not ASCII, as ntfy reads it), Click and Tags headers.
func TestWebhookNtfy(t *testing.T) {
	srv, hits := listener(t, func(int) int { return http.StatusOK })
	s := New(Options{Relay: "desk", Hooks: []config.Webhook{{URL: srv.URL, Events: []string{"ask"}, Format: "ntfy"}}})
	defer s.Close()
	s.Notice(notice(relay.NoticeAsk))
	h := recv(t, hits)
	title, err := new(mime.WordDecoder).DecodeHeader(h.header.Get("Title"))
	if err != nil || title != "Question · build · ünïcode" {
		t.Errorf("Title %q (raw %q): %v", title, h.header.Get("Title"), err)
	}
	if c := h.header.Get("Click"); c != "http://127.0.0.1:7420/s/s123" {
		t.Errorf("Click %q", c)
	}
	if tg := h.header.Get("Tags"); tg != "question,ask" {
		t.Errorf("Tags %q", tg)
	}
	if h.body != "create_session: a new session" || h.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("body %q, Content-Type %q", h.body, h.header.Get("Content-Type"))
	}
}

// TestWebhookGivesUpAndDrops (R23.10): a webhook that always fails is tried
// 1 + 3 times and counted failed; while a delivery hangs, a full queue drops
// the next notification at once (Notice never blocks) and counts it.
func TestWebhookGivesUpAndDrops(t *testing.T) {
	srv, hits := listener(t, func(int) int { return http.StatusBadGateway })
	m := metrics.New()
	s := New(Options{Relay: "desk", Hooks: []config.Webhook{{URL: srv.URL, Events: []string{"error"}}}, Count: m.WebhookResult, Backoff: time.Millisecond})
	s.Notice(notice(relay.NoticeError))
	for range 4 {
		recv(t, hits)
	}
	waitCount(t, m, Failed, 1)
	if got := counted(t, m, Retry); got != 3 {
		t.Errorf("retries: %v, want 3", got)
	}
	s.Close()

	entered, release := make(chan struct{}, 4), make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	m = metrics.New()
	s = New(Options{Relay: "desk", Hooks: []config.Webhook{{URL: hang.URL, Events: []string{"reply"}}}, Count: m.WebhookResult, Queue: 1, Workers: 1})
	defer s.Close()
	s.Notice(notice(relay.NoticeReply))
	<-entered                           // the one worker hangs on the first
	s.Notice(notice(relay.NoticeReply)) // waits in the queue
	s.Notice(notice(relay.NoticeReply)) // the queue is full: dropped
	if got := counted(t, m, Dropped); got != 1 {
		t.Errorf("dropped: %v, want 1", got)
	}
}
