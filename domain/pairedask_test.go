package domain

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/peer"
	"github.com/oar/relay/store"
)

// nullInbox is a paired relay whose inbox answers JSON null.
type nullInbox struct{ noPeers }

func (nullInbox) Inbox(context.Context, peer.Target, time.Duration) ([]map[string]json.RawMessage, error) {
	return []map[string]json.RawMessage{nil, {"id": json.RawMessage(`"ask_0123456789ab"`), "question": json.RawMessage(`"ok?"`)}}, nil
}

func (nullInbox) AnswerInbox(context.Context, peer.Target, string, peer.InboxAnswer, time.Duration) (map[string]json.RawMessage, error) {
	return nil, nil
}

// A paired relay that answers the owner's answer to its ask with null, or
// lists a null among its asks, is shown as what it gave, not a crash (R10, §13: bad input from
// another relay gets a clear result and loses nothing).
func TestAnswerPairedAskNullAnswer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOptions{peers: nullInbox{}})
	if err := f.st.AddPairing(f.ctx, &store.Pairing{Name: "lab", URL: "http://127.0.0.1:1", Host: "127.0.0.1",
		Token: "t", Permission: "write", PairedAt: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	out, err := f.r.AnswerPairedAsk(f.ctx, "lab", "ask_0123456789ab", InboxAnswer{Answer: "yes"})
	if err != nil {
		t.Fatalf("answer: %v", err)
	}
	if diff := cmp.Diff(map[string]any{"relay": "lab"}, out); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	// Its inbox with a null among the asks: the others are shown.
	list, unreachable, err := f.r.InboxWithPaired(f.ctx)
	if err != nil {
		t.Fatalf("inbox: %v", err)
	}
	var fromLab []string
	for _, a := range list {
		if a.Relay == "lab" {
			fromLab = append(fromLab, a.ID)
		}
	}
	if diff := cmp.Diff([]string{"ask_0123456789ab"}, fromLab); diff != "" {
		t.Errorf("the paired relay's asks in the inbox (-want +got):\n%s", diff)
	}
	if len(unreachable) != 0 {
		t.Errorf("unreachable: %v", unreachable)
	}
}
