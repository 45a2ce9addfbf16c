package domain

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oar/relay/peer"
	"github.com/oar/relay/store"
)

// nullInbox is a paired relay whose inbox answers JSON null.
type nullInbox struct{ noPeers }

func (nullInbox) AnswerInbox(context.Context, peer.Target, string, peer.InboxAnswer, time.Duration) (map[string]any, error) {
	return nil, nil
}

// A paired relay that answers the owner's answer to its ask with null is
// shown as an empty answer from it, not a crash (R10, §13: bad input from
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
}
