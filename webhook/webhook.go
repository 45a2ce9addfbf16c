// Package webhook sends the owner notifications (R23.10) to the webhooks of
// the config's notify.webhooks: for each event a webhook lists, one POST of
// JSON, or of ntfy's plain text with its Title, Click and Tags headers. A
// delivery never delays the relay: Notice only queues it (a bounded queue; a
// full one drops the notification and counts it), a few workers send, each
// try times out after 5 s and a failed one is tried again 3 times with a
// growing wait. Every outcome is counted (relay_notify_webhook_total{result}).
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/oar/relay"
	"github.com/oar/relay/config"
)

// The results a delivery counts (relay_notify_webhook_total{result}).
const (
	Delivered = "delivered" // the webhook answered 2xx
	Retry     = "retry"     // a try failed; another follows
	Failed    = "failed"    // every try failed: the notification is not delivered
	Dropped   = "dropped"   // the queue was full: the notification was not sent
)

// Options configures a Sender; the zero values are the relay's defaults.
type Options struct {
	Relay  string           // this relay's name, in every body
	Hooks  []config.Webhook // notify.webhooks
	Count  func(result string)
	Logger *slog.Logger
	// Timeout bounds one try (5 s); Retries is how many tries follow a
	// failed first one (3); Backoff is the wait before the first of them,
	// doubled before each next one (1 s).
	Timeout time.Duration
	Retries int
	Backoff time.Duration
	// Queue is how many deliveries may wait (256); Workers how many are
	// sent at once (2).
	Queue   int
	Workers int
}

// Sender delivers owner notifications to webhooks; its Notice never blocks
// (domain.NoticeSink).
type Sender struct {
	o      Options
	client *http.Client
	jobs   chan job
	stop   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// job is one notification for one webhook.
type job struct {
	hook config.Webhook
	n    relay.OwnerNotice
}

// New starts a Sender's workers; Close stops them.
func New(o Options) *Sender {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Retries <= 0 {
		o.Retries = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Count == nil {
		o.Count = func(string) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sender{o: o, jobs: make(chan job, o.Queue), stop: make(chan struct{}), ctx: ctx, cancel: cancel,
		client: &http.Client{Timeout: o.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for range o.Workers {
		s.wg.Go(s.work)
	}
	return s
}

// Notice queues n for every webhook that lists its event; a full queue
// drops it (counted, logged). It never blocks.
func (s *Sender) Notice(n relay.OwnerNotice) {
	for _, h := range s.o.Hooks {
		if !slices.Contains(h.Events, n.Event) {
			continue
		}
		select {
		case s.jobs <- job{hook: h, n: n}:
		default:
			s.o.Count(Dropped)
			s.o.Logger.Warn("webhook notification dropped: too many waiting", "event", n.Event, "url", h.URL, "waiting", s.o.Queue)
		}
	}
}

// Close stops the workers; a delivery under way ends at once, those still
// queued are not sent.
func (s *Sender) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.cancel()
	})
	s.wg.Wait()
}

func (s *Sender) work() {
	for {
		select {
		case <-s.stop:
			return
		case j := <-s.jobs:
			s.deliver(j)
		}
	}
}

// deliver sends one job, trying again after a failure with a doubling wait.
func (s *Sender) deliver(j job) {
	wait := s.o.Backoff
	for try := 0; ; try++ {
		err := s.send(j)
		if err == nil {
			s.o.Count(Delivered)
			return
		}
		if try == s.o.Retries {
			s.o.Count(Failed)
			s.o.Logger.Warn("webhook notification not delivered", "event", j.n.Event, "url", j.hook.URL, "tries", try+1, "err", err)
			return
		}
		s.o.Count(Retry)
		t := time.NewTimer(wait)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait *= 2
	}
}

// send makes one try: any 2xx answer delivers.
func (s *Sender) send(j job) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.o.Timeout)
	defer cancel()
	req, err := s.request(ctx, j)
	if err != nil {
		return err
	}
	res, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("the webhook answered %s", res.Status)
	}
	return nil
}

// request builds the POST of a job in its webhook's format.
func (s *Sender) request(ctx context.Context, j job) (*http.Request, error) {
	var body []byte
	ctype := "application/json"
	if j.hook.Format == config.WebhookNtfy {
		body, ctype = []byte(ntfyText(j.n)), "text/plain; charset=utf-8"
	} else {
		var err error
		if body, err = json.Marshal(jsonBody(s.o.Relay, j.n)); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.hook.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "relay/"+s.o.Relay)
	if j.hook.Format == config.WebhookNtfy {
		ntfyHeaders(req.Header, j.n)
	}
	return req, nil
}

// Body is the JSON a webhook gets (format json).
type Body struct {
	Event   string      `json:"event"`
	Relay   string      `json:"relay"`
	Session BodySession `json:"session"`
	Text    string      `json:"text"`
	OpenURL *string     `json:"openUrl"` // null when the relay knows no public URL
	At      time.Time   `json:"at"`
}

// BodySession names the session a notification is about.
type BodySession struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

func jsonBody(relayName string, n relay.OwnerNotice) Body {
	b := Body{Event: n.Event, Relay: relayName, Session: BodySession{ID: n.Session, Title: n.Title}, Text: n.Text, At: n.At}
	if n.OpenURL != "" {
		b.OpenURL = &n.OpenURL
	}
	return b
}

// ntfyTags are the Tags header's first tag per event: ntfy shows it as an emoji.
var ntfyTags = map[string]string{relay.NoticeCard: "lock", relay.NoticeAsk: "question",
	relay.NoticeReply: "speech_balloon", relay.NoticeError: "x"}

// ntfyText is ntfy's message: the text, or the heading when there is none.
func ntfyText(n relay.OwnerNotice) string {
	if n.Text != "" {
		return n.Text
	}
	return n.Heading
}

// ntfyHeaders sets ntfy's Title (RFC 2047 encoded when it is not ASCII, as
// ntfy reads it), Click (the session's page) and Tags (an emoji, the event).
func ntfyHeaders(h http.Header, n relay.OwnerNotice) {
	h.Set("Title", mime.QEncoding.Encode("utf-8", n.Heading))
	if n.OpenURL != "" {
		h.Set("Click", n.OpenURL)
	}
	h.Set("Tags", ntfyTags[n.Event]+","+n.Event)
}
