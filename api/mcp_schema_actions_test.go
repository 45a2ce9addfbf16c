package api

import (
	"slices"
	"testing"

	"github.com/oar/relay/domain"
)

// TestSchemaActionsFromRegistry checks that relay_tool's action enum is the
// domain's registry, in its order, and a fresh copy per schema (R3.8).
func TestSchemaActionsFromRegistry(t *testing.T) {
	schema := relayToolInputSchema()
	props := schema["properties"].(map[string]any)
	enum := props["action"].(map[string]any)["enum"].([]string)
	if !slices.Equal(enum, domain.ActionNames()) {
		t.Fatalf("schema enum %v, registry %v", enum, domain.ActionNames())
	}
	enum[0] = "changed"
	again := relayToolInputSchema()["properties"].(map[string]any)["action"].(map[string]any)["enum"].([]string)
	if again[0] == "changed" {
		t.Error("the schema's enum is shared between schemas")
	}
	for _, a := range domain.WaitingActions() {
		if !taskActions[a] {
			t.Errorf("%s waits for a reply but cannot become a task", a)
		}
	}
}
