package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/oar/relay"
)

// Notify is the yaml notify section (R23.10): where owner notifications go
// besides the console's browser notifications.
type Notify struct {
	Webhooks []Webhook // notify.webhooks
}

// Webhook is one entry of notify.webhooks: the events it lists are POSTed
// to URL, as JSON or as ntfy's plain text.
type Webhook struct {
	URL    string   // url: http or https
	Events []string // events: card, ask, reply, error (at least one, each once)
	Format string   // format: json (default) | ntfy
}

// The formats of a webhook's body.
const (
	WebhookJSON = "json" // {"event","relay","session":{"id","title"},"text","openUrl","at"}
	WebhookNtfy = "ntfy" // the text as the body; Title, Click and Tags headers
)

// webhooks decodes notify.webhooks.
func (d *fileDecoder) webhooks(p *[]Webhook) func(string, *yaml.Node) error {
	return mappings(d, p, "a list of webhooks", func(w *Webhook) []field {
		w.Format = WebhookJSON // the default, when format is not given
		return []field{
			{"url", d.str(&w.URL)},
			{"events", d.strs(&w.Events)},
			{"format", d.str(&w.Format)},
		}
	})
}

// validate checks every webhook: an http(s) URL, known events each named
// once, a known format.
func (n Notify) validate() error {
	for i, w := range n.Webhooks {
		if err := w.validate(fmt.Sprintf("notify.webhooks[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one webhook; at names it in errors.
func (w Webhook) validate(at string) error {
	if _, ok := httpURL(w.URL); !ok {
		return fmt.Errorf("config: %s.url must be an http or https URL like https://ntfy.sh/my-topic (got %q)", at, w.URL)
	}
	if err := w.validateEvents(at); err != nil {
		return err
	}
	if w.Format != "" && w.Format != WebhookJSON && w.Format != WebhookNtfy {
		return fmt.Errorf("config: %s.format must be json or ntfy (got %q)", at, w.Format)
	}
	return nil
}

// validateEvents checks events: at least one, each a notice event, none twice.
func (w Webhook) validateEvents(at string) error {
	names := strings.Join(relay.NoticeEvents, ", ")
	if len(w.Events) == 0 {
		return fmt.Errorf("config: %s.events must name at least one of %s", at, names)
	}
	for j, e := range w.Events {
		if !slices.Contains(relay.NoticeEvents, e) {
			return fmt.Errorf("config: %s.events[%d] is %q; the events are %s", at, j, e, names)
		}
		if slices.Index(w.Events, e) != j {
			return fmt.Errorf("config: %s.events names %q twice", at, e)
		}
	}
	return nil
}
