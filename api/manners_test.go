package api

import (
	"strings"
	"testing"
)

// The tool description tells the agent the seed's manners (issue 13), briefly:
// agents pay for every token of it.
func TestToolDescriptionManners(t *testing.T) {
	d := relayToolDescription
	for _, rule := range []string{
		"ask the owner before you answer another session's question, unless told to decide yourself",
		"After ask, go on with what does not depend on the answer",
		"do not ask the same again while it is open",
		"A subscription only notifies: it approves and answers nothing",
		"A locked relay: ask the owner to mention it",
	} {
		if !strings.Contains(d, rule) {
			t.Errorf("relay_tool's description lacks %q", rule)
		}
	}
	if n := len(strings.Fields(d)); n > 220 {
		t.Errorf("relay_tool's description has %d words; keep it under 220", n)
	}
}
