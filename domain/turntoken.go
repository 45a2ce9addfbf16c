package domain

import (
	"strings"
	"time"
)

// Turn tokens (R18.19). A session's own token is shown once, when the session
// is made, and stored as its SHA-256 only; the relay cannot hand it to the
// session's agent afterwards. So each turn of an agent process (exec and the
// agent CLIs: they call back on POST /mcp with RELAY_TOKEN) gets a token of
// its own, minted when the turn starts: stored hashed like every token,
// naming the session (so the agent acts as its session, as before), expiring
// turnTokenTTL after the last renewal (renewed with the turn's lease), and
// revoked when the turn ends or the session is archived. The agent CLIs'
// resume is untouched: their conversation id is the relay's record, not the
// token, and the MCP hand-over (config file, -c override, settings file) is
// written anew for every turn.

// TurnTokenPrefix starts every turn token (so a process caches it only briefly).
const TurnTokenPrefix = "rtt_"

// turnTokenTTL is how long a turn token lives past its last renewal (its
// turn's lease is renewed every 5 s): a process that died mid-turn leaves no
// token that works for long.
const turnTokenTTL = time.Minute

// turnTokenCache is how long a process trusts its cached copy of a turn
// token: the turn may have ended in another process.
const turnTokenCache = 2 * time.Second

// inProcess are the provider types whose agents run inside the relay and call
// relay_tool through the turn's host, without a token.
var inProcess = map[string]bool{"scripted": true, "openai": true, ProviderExternal: true}

// tokenCacheTTL is how long a cached token is trusted without Redis.
func tokenCacheTTL(tok string) time.Duration {
	if strings.HasPrefix(tok, TurnTokenPrefix) {
		return turnTokenCache
	}
	return tokenTTL
}
