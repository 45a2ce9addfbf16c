package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// An agent without credentials (R24.3) answers session/new, session/load
// or session/prompt with ACP's auth_required error (-32000 "Authentication
// required", data.authMethods optional) or an error saying so. The turn
// ends with an error naming the agent and how to sign it in, taken from
// the auth methods of the error or of the agent's initialize answer.

// acpAuthMethod is what the relay shows of one of the agent's auth
// methods (any of ACP's kinds: agent, env_var, terminal).
type acpAuthMethod struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// authMethodsOf reads the auth methods in v (the initialize answer's, or
// an error's data.authMethods), whatever their kind.
func authMethodsOf(v any) []acpAuthMethod {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out []acpAuthMethod
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// authRequired reports whether err is the agent's answer that it needs a
// sign-in, and the auth methods the error names.
func authRequired(err error) (bool, []acpAuthMethod) {
	var re *acp.RequestError
	if !errors.As(err, &re) {
		return false, nil
	}
	msg := strings.ToLower(re.Message)
	auth := strings.Contains(msg, "authentication required") || strings.Contains(msg, "auth_required") ||
		re.Code == -32000 && (strings.Contains(msg, "auth") || strings.Contains(msg, "log in") || strings.Contains(msg, "login"))
	if !auth {
		return false, nil
	}
	var data struct {
		AuthMethods json.RawMessage `json:"authMethods"`
	}
	if b, jerr := json.Marshal(re.Data); jerr == nil {
		_ = json.Unmarshal(b, &data)
	}
	var methods []acpAuthMethod
	if len(data.AuthMethods) > 0 {
		methods = authMethodsOf(data.AuthMethods)
	}
	return true, methods
}

// agentName names the agent for the owner: its title (initialize's
// agentInfo), else the provider's name, with the provider's id.
func (pr *acpProc) agentName() string {
	name := pr.p.c.Name
	if info := pr.info; info != nil {
		switch {
		case info.Title != nil && *info.Title != "":
			name = *info.Title
		case info.Name != "":
			name = info.Name
		}
	}
	if name == "" || name == pr.p.c.ID {
		return fmt.Sprintf("%q", pr.p.c.ID)
	}
	return fmt.Sprintf("%s (provider %q)", name, pr.p.c.ID)
}

// authText is the turn's error when the agent needs a sign-in: the agent,
// the step it asked for, and the agent's own words.
func (pr *acpProc) authText(step string, err error, methods []acpAuthMethod) string {
	if len(methods) == 0 {
		methods = pr.auth
	}
	var ways []string
	for _, m := range methods {
		w := strings.TrimSpace(m.Description)
		if n := strings.TrimSpace(m.Name); n != "" && w != "" {
			w = n + ": " + w
		} else if w == "" {
			w = n
		}
		if w != "" {
			ways = append(ways, excerptLine(w, 200))
		}
	}
	how := "it names no sign-in method: sign it in with its own CLI as the user the relay runs it as, or give it an API key in the provider's env"
	if len(ways) > 0 {
		how = strings.Join(ways, "; or ")
	}
	said := err.Error()
	var re *acp.RequestError
	if errors.As(err, &re) {
		said = re.Message
	}
	return fmt.Sprintf("The agent %s is not signed in (it answered %s with %q). Sign it in: %s.",
		pr.agentName(), step, excerptLine(said, 300), how)
}
