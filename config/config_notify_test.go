package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNotifyWebhooks (R23.10): notify.webhooks is read with its url, events
// and format (json by default), and a bad entry is refused with a sentence
// naming it; an unknown key is named with the nearest known one.
func TestNotifyWebhooks(t *testing.T) {
	withHome(t)
	good := "notify:\n  webhooks:\n    - url: http://127.0.0.1:9/hook\n      events: [card, ask]\n    - url: https://ntfy.example/topic\n      events: [reply, error]\n      format: ntfy\n"
	c, err := Load(map[string]string{"config": writeFile(t, good)}, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := []Webhook{{URL: "http://127.0.0.1:9/hook", Events: []string{"card", "ask"}, Format: "json"},
		{URL: "https://ntfy.example/topic", Events: []string{"reply", "error"}, Format: "ntfy"}}
	if diff := cmp.Diff(want, c.Notify.Webhooks); diff != "" {
		t.Errorf("webhooks (-want +got):\n%s", diff)
	}

	hook := func(body string) string {
		return "notify:\n  webhooks:\n    - " + strings.ReplaceAll(body, "\n", "\n      ") + "\n"
	}
	for _, tt := range []struct{ name, yaml, want string }{
		{"unknown key", hook("url: http://x/\nevent: [card]"),
			`config %s: unknown key "notify.webhooks[0].event" (line 4); did you mean "events"?`},
		{"unknown section key", "notify:\n  webhook: []\n",
			`config %s: unknown key "notify.webhook" (line 2); did you mean "webhooks"?`},
		{"not a list", "notify:\n  webhooks: http://x/\n",
			`config %s: notify.webhooks must be a list of webhooks (line 2, got "http://x/")`},
		{"no url", hook("events: [card]"),
			`config: notify.webhooks[0].url must be an http or https URL like https://ntfy.sh/my-topic (got "")`},
		{"bad scheme", hook("url: ftp://x/\nevents: [card]"),
			`config: notify.webhooks[0].url must be an http or https URL like https://ntfy.sh/my-topic (got "ftp://x/")`},
		{"no events", hook("url: http://x/"),
			`config: notify.webhooks[0].events must name at least one of card, ask, reply, error`},
		{"unknown event", hook("url: http://x/\nevents: [card, turn]"),
			`config: notify.webhooks[0].events[1] is "turn"; the events are card, ask, reply, error`},
		{"event twice", hook("url: http://x/\nevents: [ask, ask]"),
			`config: notify.webhooks[0].events names "ask" twice`},
		{"bad format", hook("url: http://x/\nevents: [ask]\nformat: slack"),
			`config: notify.webhooks[0].format must be json or ntfy (got "slack")`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, tt.yaml)
			_, err := Load(map[string]string{"config": p}, nil)
			want := tt.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, p)
			}
			if err == nil {
				t.Fatalf("Load succeeded, want %q", want)
			}
			if diff := cmp.Diff(want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}
