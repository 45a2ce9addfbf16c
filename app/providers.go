package app

import (
	"fmt"
	"log/slog"

	"github.com/oar/relay/api"
	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
)

// buildProviders makes the configured providers, in their order, each by
// the builder of its type; scripted is the last one of type scripted, or a
// built-in one appended when there is none.
func buildProviders(cfg config.Config, log *slog.Logger, sbs sandboxes, us users) ([]provider.Provider, *provider.Scripted, error) {
	b := providerBuilder{cfg: cfg, log: log, sbs: sbs, us: us}
	var out []provider.Provider
	var scripted *provider.Scripted
	for _, p := range cfg.Providers {
		build, ok := providerBuilders[p.Type]
		if !ok {
			continue
		}
		pr, err := build(b, p)
		if err != nil {
			return nil, nil, err
		}
		if s, ok := pr.(*provider.Scripted); ok {
			scripted = s
		}
		out = append(out, pr)
	}
	if scripted == nil {
		scripted = provider.NewScripted(provider.Info{})
		out = append(out, scripted)
	}
	return out, scripted, nil
}

// providerBuilder holds what the providers are made with: the configuration,
// the logger, and the sandboxes and users by provider id.
type providerBuilder struct {
	cfg config.Config
	log *slog.Logger
	sbs sandboxes
	us  users
}

// providerBuilders make a provider of each type.
var providerBuilders = map[string]func(providerBuilder, config.Provider) (provider.Provider, error){
	config.TypeScripted:   providerBuilder.scripted,
	config.TypeExec:       providerBuilder.exec,
	config.TypeClaudeCode: providerBuilder.cli, // R17.1
	config.TypeCodex:      providerBuilder.cli,
	config.TypeGeminiCLI:  providerBuilder.cli,
	config.TypeACP:        providerBuilder.acp, // R22.1
	config.TypeOpenAI:     providerBuilder.openAI,
}

func (b providerBuilder) scripted(p config.Provider) (provider.Provider, error) {
	return provider.NewScripted(provider.Info{ID: p.ID, Name: p.Name, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo}), nil
}

func (b providerBuilder) exec(p config.Provider) (provider.Provider, error) {
	return provider.NewExec(provider.ExecConfig{ID: p.ID, Name: p.Name, Command: p.Command, Models: p.Models,
		DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Env: p.Env, Sandbox: b.sbs[p.ID], User: b.us[p.ID]}), nil
}

func (b providerBuilder) cli(p config.Provider) (provider.Provider, error) {
	cli, err := provider.NewCLI(provider.CLIConfig{ID: p.ID, Name: p.Name, Type: p.Type, Command: p.Command, Args: p.Args,
		Env: p.Env, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo,
		Silence: b.cfg.Timing.AgentSilence, Sandbox: b.sbs[p.ID], User: b.us[p.ID]})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	b.warnUnavailable(p.ID, cli.Info())
	return cli, nil
}

func (b providerBuilder) acp(p config.Provider) (provider.Provider, error) {
	ap := provider.NewACP(provider.ACPConfig{ID: p.ID, Name: p.Name, Command: p.Command, Env: p.Env, Models: p.Models,
		DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Silence: b.cfg.Timing.AgentSilence,
		Idle: b.cfg.Timing.ACPIdle, Logger: b.log, Sandbox: b.sbs[p.ID], User: b.us[p.ID]})
	b.warnUnavailable(p.ID, ap.Info())
	return ap, nil
}

func (b providerBuilder) openAI(p config.Provider) (provider.Provider, error) {
	name, desc, schema := api.RelayToolForModels()
	return provider.NewOpenAI(provider.OpenAIConfig{ID: p.ID, Name: p.Name, BaseURL: p.BaseURL, APIKeyEnv: p.APIKeyEnv,
		Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, MaxSteps: p.MaxSteps,
		SystemPrompt: p.SystemPrompt, ToolName: name, ToolDescription: desc, ToolSchema: schema, Logger: b.log}), nil
}

// warnUnavailable warns of an agent whose command cannot be found.
func (b providerBuilder) warnUnavailable(id string, in provider.Info) {
	if in.Status == provider.StatusUnavailable {
		b.log.Warn("provider unavailable: prompts to it are refused until its command can be found", "provider", id, "why", in.StatusReason)
	}
}
