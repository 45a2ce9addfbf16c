package config

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
)

var providerIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// envNameRe is a portable environment variable name (api_key_env).
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateProviders checks the providers list: the ids first, all of them
// (switch_to may name a later one), then each provider by providerChecks.
func (c Config) validateProviders() error {
	ids, err := c.providerIDs()
	if err != nil {
		return err
	}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		for _, check := range providerChecks {
			if err := check(at, p, ids); err != nil {
				return err
			}
		}
	}
	return nil
}

// providerIDs checks every provider's id (set, well-formed, unique) and
// returns the index of each.
func (c Config) providerIDs() (map[string]int, error) {
	seen := map[string]int{}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		if p.ID == "" {
			return nil, fmt.Errorf("config: %s.id must not be empty", at)
		}
		if !providerIDRe.MatchString(p.ID) {
			return nil, fmt.Errorf("config: %s.id must match %s (got %q)", at, providerIDRe, p.ID)
		}
		if j, dup := seen[p.ID]; dup {
			return nil, fmt.Errorf("config: %s.id %q is already used by providers[%d]", at, p.ID, j)
		}
		seen[p.ID] = i
	}
	return seen, nil
}

// providerCheck checks one provider; at names it in errors ("providers[2]"),
// ids holds every configured provider's id.
type providerCheck func(at string, p Provider, ids map[string]int) error

// only adapts a check that needs neither the other providers' ids.
func only(check func(at string, p Provider) error) providerCheck {
	return func(at string, p Provider, _ map[string]int) error { return check(at, p) }
}

// providerChecks are the checks of one provider, in the order their problems
// are reported.
var providerChecks = []providerCheck{
	only(checkType),
	only(checkAgentCommand),
	only(checkScriptedID),
	only(checkExecCommand),
	only(checkOpenAI),
	only(checkModels),
	checkSwitchTo,
	only(checkCap),
	only(checkBilling),
	only(checkClaude),
	only(checkEnv),
	only(checkSandbox),
	only(checkUser),
}

// checkType validates type: one of the provider types.
func checkType(at string, p Provider) error {
	switch p.Type {
	case TypeExec, TypeOpenAI, TypeScripted, TypeClaudeCode, TypeCodex, TypeGeminiCLI, TypeACP:
		return nil
	}
	return fmt.Errorf("config: %s.type must be one of exec, openai, scripted, claude-code, codex, gemini-cli, acp (got %q)", at, p.Type)
}

// checkAgentCommand validates command and args of the agents run as
// processes: acp needs its command, args and command[0] are the agent CLIs'.
func checkAgentCommand(at string, p Provider) error {
	if p.Type == TypeACP && (len(p.Command) == 0 || p.Command[0] == "") {
		return fmt.Errorf("config: %s.command must name the ACP agent's binary and its arguments for type acp (e.g. [gemini, --acp])", at)
	}
	if len(p.Args) > 0 && !IsAgentCLI(p.Type) {
		return fmt.Errorf("config: %s.args is only for the agent CLI types claude-code, codex, gemini-cli (got type %q)", at, p.Type)
	}
	if IsAgentCLI(p.Type) && len(p.Command) > 0 && p.Command[0] == "" {
		return fmt.Errorf("config: %s.command[0] must name the %s binary (or leave command out for the default)", at, p.Type)
	}
	return nil
}

// checkScriptedID: the id "scripted" is the scripted provider's.
func checkScriptedID(at string, p Provider) error {
	if p.ID == ScriptedID && p.Type != TypeScripted {
		return fmt.Errorf("config: %s.type must be \"scripted\" for id \"scripted\" (got %q)", at, p.Type)
	}
	return nil
}

// checkExecCommand: an exec provider names its command.
func checkExecCommand(at string, p Provider) error {
	if p.Type == TypeExec && (len(p.Command) == 0 || p.Command[0] == "") {
		return fmt.Errorf("config: %s.command must not be empty for type exec", at)
	}
	return nil
}

// checkOpenAI validates the keys of type openai: on an openai provider their
// values, on any other their absence.
func checkOpenAI(at string, p Provider) error {
	if p.Type != TypeOpenAI {
		return checkNotOpenAI(at, p)
	}
	if p.BaseURL == "" {
		return fmt.Errorf("config: %s.base_url is required for type openai", at)
	}
	u, ok := httpURL(p.BaseURL)
	if !ok {
		return fmt.Errorf("config: %s.base_url must be an http or https URL (got %q)", at, p.BaseURL)
	}
	if u.User != nil {
		return fmt.Errorf("config: %s.base_url must not carry a user or password; put the key in the environment variable named by api_key_env", at)
	}
	if p.APIKeyEnv != "" && !envNameRe.MatchString(p.APIKeyEnv) {
		return fmt.Errorf("config: %s.api_key_env must be the name of an environment variable, like OPENAI_API_KEY (got %q; the key itself belongs in that variable, never in the file)", at, p.APIKeyEnv)
	}
	if p.MaxSteps < 0 || p.MaxSteps > 1000 {
		return fmt.Errorf("config: %s.max_steps must be between 1 and 1000 (got %d; leave it out for 25)", at, p.MaxSteps)
	}
	return nil
}

// checkNotOpenAI: the keys of type openai are set on no other type.
func checkNotOpenAI(at string, p Provider) error {
	for _, k := range []struct {
		key string
		set bool
	}{{"base_url", p.BaseURL != ""}, {"api_key_env", p.APIKeyEnv != ""}, {"max_steps", p.MaxSteps != 0}, {"system_prompt", p.SystemPrompt != ""}} {
		if k.set {
			return fmt.Errorf("config: %s.%s applies only to type openai (this provider is type %s)", at, k.key, p.Type)
		}
	}
	return nil
}

// checkModels validates models and default_model.
func checkModels(at string, p Provider) error {
	for j, m := range p.Models {
		if m == "" {
			return fmt.Errorf("config: %s.models[%d] must not be empty", at, j)
		}
	}
	if p.DefaultModel != "" && len(p.Models) > 0 && !contains(p.Models, p.DefaultModel) {
		return fmt.Errorf("config: %s.default_model must be one of %s (got %q)", at, strings.Join(p.Models, ", "), p.DefaultModel)
	}
	return nil
}

// checkSwitchTo: switch_to names another configured provider.
func checkSwitchTo(at string, p Provider, ids map[string]int) error {
	if p.SwitchTo == "" {
		return nil
	}
	if _, ok := ids[p.SwitchTo]; !ok || p.SwitchTo == p.ID {
		return fmt.Errorf("config: %s.switch_to must name another configured provider (got %q)", at, p.SwitchTo)
	}
	return nil
}

// checkBilling validates billing (R24.6).
func checkBilling(at string, p Provider) error {
	if p.Billing != "" && p.Billing != BillingSubscription && p.Billing != BillingAPIKey {
		return fmt.Errorf("config: %s.billing must be subscription or api_key (got %q)", at, p.Billing)
	}
	return nil
}

// checkClaude validates claude, compact_window_zero and always_thinks (R7.10).
func checkClaude(at string, p Provider) error {
	if p.Claude && p.Type != TypeExec && p.Type != TypeOpenAI {
		return fmt.Errorf("config: %s.claude applies only to types exec and openai (this provider is type %s)", at, p.Type)
	}
	if p.CompactWindowZero < 0 {
		return fmt.Errorf("config: %s.compact_window_zero must be a number of tokens above 0 (got %d; leave it out when the provider declares none)", at, p.CompactWindowZero)
	}
	if p.ClaudeSessions() && (p.CompactWindowZero > 0 || p.AlwaysThinks) {
		return fmt.Errorf("config: %s.compact_window_zero and always_thinks are for providers whose sessions are not Claude sessions (this one's are)", at)
	}
	return nil
}

// checkEnv validates the names of env.
func checkEnv(at string, p Provider) error {
	for k := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("config: %s.env has an invalid variable name %q", at, k)
		}
	}
	return nil
}

// checkSandbox validates sandbox, sandbox_rw and sandbox_ro (R18.31).
func checkSandbox(at string, p Provider) error {
	switch p.Sandbox {
	case "", "none":
		if len(p.SandboxRW) > 0 || len(p.SandboxRO) > 0 {
			return fmt.Errorf("config: %s.sandbox_rw and sandbox_ro apply only with sandbox: bwrap", at)
		}
		return nil
	case SandboxBwrap:
	default:
		return fmt.Errorf("config: %s.sandbox must be bwrap or none (got %q)", at, p.Sandbox)
	}
	if !RunsProcesses(p.Type) {
		return fmt.Errorf("config: %s.sandbox applies only to the types that run agent processes (exec, claude-code, codex, gemini-cli, acp); type %s runs none", at, p.Type)
	}
	return checkSandboxPaths(at, p)
}

// checkSandboxPaths validates sandbox_rw and sandbox_ro: absolute paths, not /.
func checkSandboxPaths(at string, p Provider) error {
	for _, l := range []struct {
		key   string
		paths []string
	}{{"sandbox_rw", p.SandboxRW}, {"sandbox_ro", p.SandboxRO}} {
		for j, path := range l.paths {
			if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
				return fmt.Errorf("config: %s.%s[%d] must be an absolute path (got %q)", at, l.key, j, path)
			}
			if filepath.Clean(path) == "/" {
				return fmt.Errorf("config: %s.%s[%d] must not be / (the whole file system is already read-only in the sandbox; name the paths the agent needs)", at, l.key, j)
			}
		}
	}
	return nil
}

// checkUser validates user (R18.26): a user name or a numeric uid, only on
// the types that run processes. Whether it exists is checked at start.
func checkUser(at string, p Provider) error {
	if p.User == "" {
		return nil
	}
	if !RunsProcesses(p.Type) {
		return fmt.Errorf("config: %s.user applies only to the types that run agent processes (exec, claude-code, codex, gemini-cli, acp); type %s runs none", at, p.Type)
	}
	if !userRe.MatchString(p.User) {
		return fmt.Errorf("config: %s.user must be a user name or a numeric uid (got %q)", at, p.User)
	}
	return nil
}

// userRe is a user name (POSIX portable characters, as useradd takes them)
// or a uid.
var userRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?$`)

// checkCap validates monthly_cap and cap_unit (R7.8): a cap needs its unit;
// a cost in USD is only reported by the agent CLIs.
func checkCap(at string, p Provider) error {
	if p.MonthlyCap == 0 && p.CapUnit == "" {
		return nil
	}
	if p.MonthlyCap <= 0 || math.IsNaN(p.MonthlyCap) || math.IsInf(p.MonthlyCap, 0) {
		return fmt.Errorf("config: %s.monthly_cap must be a number above 0 (got %v; leave it out for no cap)", at, p.MonthlyCap)
	}
	switch p.CapUnit {
	case CapTokens:
	case CapUSD:
		if !IsAgentCLI(p.Type) {
			return fmt.Errorf("config: %s.cap_unit usd needs a provider that reports its cost (claude-code, codex, gemini-cli); type %s counts tokens only: use cap_unit: tokens", at, p.Type)
		}
	default:
		return fmt.Errorf("config: %s.cap_unit must be usd or tokens with monthly_cap (got %q)", at, p.CapUnit)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
