package domain

import (
	"context"
	"strings"

	"github.com/oar/relay"
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

// OwnerNewToken gives an external session a new token (R23.5, POST
// /api/v1/sessions/{id}/token), shown this once; the old one is refused at
// once, by every process (the "tokens" notification empties their caches).
// Any other session is refused: its agent gets a token of its own for each
// turn (R18.19).
func (r *Relay) OwnerNewToken(ctx context.Context, ref string) (*relay.SessionToken, error) {
	s, e := r.sessionByRef(ctx, ref)
	if e != nil {
		return nil, e
	}
	if !isExternal(s) {
		return nil, Errorf(CodeUnsupported, "Session %s (%q) is not an external session: only an external MCP client's session has a token to give out (the relay gives its own agents a new one for each turn). %s",
			id8(s.ID), s.Title, nothingChanged)
	}
	if s.Archived {
		return nil, Errorf(CodeInvalidInput, "Session %s (%q) is archived: its token was revoked and it gets no new one. %s", id8(s.ID), s.Title, nothingChanged)
	}
	tok, err := r.tokens.rotateSessionToken(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	if tok == "" { // archived or deleted meanwhile
		return nil, Errorf(CodeNotFound, "Session %s (%q) was archived or deleted meanwhile; it gets no new token. %s", id8(s.ID), s.Title, nothingChanged)
	}
	return &relay.SessionToken{Session: s.ID, Token: tok}, nil
}
