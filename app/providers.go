package app

import (
	"fmt"
	"log/slog"

	"github.com/oar/relay/api"
	"github.com/oar/relay/config"
	"github.com/oar/relay/provider"
)

func buildProviders(cfg config.Config, log *slog.Logger, sbs sandboxes, us users) ([]provider.Provider, *provider.Scripted, error) {
	var out []provider.Provider
	var scripted *provider.Scripted
	for _, p := range cfg.Providers {
		switch p.Type {
		case config.TypeScripted:
			scripted = provider.NewScripted(provider.Info{ID: p.ID, Name: p.Name, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo})
			out = append(out, scripted)
		case config.TypeExec:
			out = append(out, provider.NewExec(provider.ExecConfig{ID: p.ID, Name: p.Name, Command: p.Command, Models: p.Models,
				DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Env: p.Env, Sandbox: sbs[p.ID], User: us[p.ID]}))
		case config.TypeClaudeCode, config.TypeCodex, config.TypeGeminiCLI: // R17.1
			cli, err := provider.NewCLI(provider.CLIConfig{ID: p.ID, Name: p.Name, Type: p.Type, Command: p.Command, Args: p.Args,
				Env: p.Env, Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo,
				Silence: cfg.Timing.AgentSilence, Sandbox: sbs[p.ID], User: us[p.ID]})
			if err != nil {
				return nil, nil, fmt.Errorf("config: %w", err)
			}
			if in := cli.Info(); in.Status == provider.StatusUnavailable {
				log.Warn("provider unavailable: prompts to it are refused until its command can be found", "provider", p.ID, "why", in.StatusReason)
			}
			out = append(out, cli)
		case config.TypeACP: // R22.1
			ap := provider.NewACP(provider.ACPConfig{ID: p.ID, Name: p.Name, Command: p.Command, Env: p.Env, Models: p.Models,
				DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, Silence: cfg.Timing.AgentSilence,
				Idle: cfg.Timing.ACPIdle, Logger: log, Sandbox: sbs[p.ID], User: us[p.ID]})
			if in := ap.Info(); in.Status == provider.StatusUnavailable {
				log.Warn("provider unavailable: prompts to it are refused until its command can be found", "provider", p.ID, "why", in.StatusReason)
			}
			out = append(out, ap)
		case config.TypeOpenAI:
			name, desc, schema := api.RelayToolForModels()
			out = append(out, provider.NewOpenAI(provider.OpenAIConfig{ID: p.ID, Name: p.Name, BaseURL: p.BaseURL, APIKeyEnv: p.APIKeyEnv,
				Models: p.Models, DefaultModel: p.DefaultModel, Efforts: p.Efforts, SwitchTo: p.SwitchTo, MaxSteps: p.MaxSteps,
				SystemPrompt: p.SystemPrompt, ToolName: name, ToolDescription: desc, ToolSchema: schema, Logger: log}))
		}
	}
	if scripted == nil {
		scripted = provider.NewScripted(provider.Info{})
		out = append(out, scripted)
	}
	return out, scripted, nil
}
