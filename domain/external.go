package domain

import (
	"context"
	"strings"

	"github.com/oar/relay/provider"
	"github.com/oar/relay/store"
)

// ProviderExternal is the session kind of an MCP client the user runs
// themself with the session's token (R17.7): the relay runs no turns for it.
const ProviderExternal = "external"

func isExternal(s *store.Session) bool { return s != nil && s.Provider == ProviderExternal }

// useExternal ends the error of a call from a session whose agent cannot
// act now (no running turn, R24.5): an MCP client of one's own belongs to an
// external session, whose calls are their own live turn.
const useExternal = `For an MCP client of your own, use an external session: the owner creates one with POST /api/v1/sessions {"provider": "external"} and gives the client its token.`

// notPromptable refuses a prompt into an external session (R17.7).
func notPromptable(s *store.Session, nothing string) *Error {
	return Errorf(CodeUnsupported, "Session %s (%q) is an external MCP client; the relay cannot prompt it. %s", id8(s.ID), s.Title, nothing)
}

// notWakeable refuses what would need the relay to wake an external session.
func notWakeable(action, nothing string) *Error {
	return Errorf(CodeUnsupported, "This session is an external MCP client: the relay cannot wake it, so %s is not available to it. %s", action, nothing)
}

// externalSession checks the owner's request for an external session.
func externalSession(in NewSession) *Error {
	var given []string
	for _, f := range []struct{ name, v string }{{"text", in.Text}, {"model", in.Model}, {"effort", in.Effort}} {
		if strings.TrimSpace(f.v) != "" {
			given = append(given, f.name)
		}
	}
	if len(given) > 0 {
		return Errorf(CodeInvalidInput, "An external session takes no %s: its agent is the MCP client you connect with the session's token, and the relay runs no turns for it. %s",
			strings.Join(given, ", "), nothingCreated)
	}
	return nil
}

// externalProvider stands for the MCP client of an external session.
type externalProvider struct{}

func (externalProvider) Info() provider.Info {
	return provider.Info{ID: ProviderExternal, Name: "External MCP client", Type: ProviderExternal}
}

func (externalProvider) Run(context.Context, provider.Turn, provider.Host) (provider.Result, error) {
	return provider.Result{}, &provider.TurnError{Msg: "This session is an external MCP client; the relay runs no turns for it."}
}
