package api

import "encoding/json"

// RelayToolForModels is relay_tool as the MCP route lists it — its name, its
// description and its input schema as JSON — for providers that offer it to
// a model as a function tool themselves (openai, R17.6).
func RelayToolForModels() (name, description string, schema json.RawMessage) {
	b, err := json.Marshal(relayToolInputSchema())
	if err != nil {
		panic("relay_tool input schema: " + err.Error()) // a static value: cannot fail
	}
	return relayToolName, relayToolDescription, b
}
