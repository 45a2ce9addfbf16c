package config

import (
	"testing"
)

// R17.6: the openai provider's keys, read from the file and checked.
func TestLoadOpenAIProviderKeys(t *testing.T) {
	withHome(t)
	p := writeFile(t, `providers:
  - id: local
    type: openai
    base_url: http://127.0.0.1:11434/v1
    api_key_env: OLLAMA_KEY
    default_model: llama3.2
    max_steps: 12
    system_prompt: |
      You are a session on a relay.
`)
	c, err := Load(map[string]string{"config": p}, envOf(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got, ok := c.Provider("local")
	if !ok {
		t.Fatalf("no provider local in %+v", c.Providers)
	}
	if got.Type != TypeOpenAI || got.BaseURL != "http://127.0.0.1:11434/v1" || got.APIKeyEnv != "OLLAMA_KEY" ||
		got.DefaultModel != "llama3.2" || got.MaxSteps != 12 || got.SystemPrompt != "You are a session on a relay.\n" {
		t.Errorf("provider = %+v", got)
	}

	_, err = Load(map[string]string{"config": writeFile(t, "providers:\n  - id: local\n    type: openai\n    base_url: http://x/v1\n    max_steps: many\n")}, envOf(nil))
	if err == nil {
		t.Fatal("max_steps: many was accepted")
	}
}

func TestValidateOpenAIProvider(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *Provider)
		want   string
	}{
		{"valid", func(p *Provider) { p.APIKeyEnv = "OPENAI_API_KEY"; p.MaxSteps = 40; p.SystemPrompt = "hi" }, ""},
		{"key instead of a variable name", func(p *Provider) { p.APIKeyEnv = "sk-abc123" },
			`config: providers[1].api_key_env must be the name of an environment variable, like OPENAI_API_KEY (got "sk-abc123"; the key itself belongs in that variable, never in the file)`},
		{"negative max_steps", func(p *Provider) { p.MaxSteps = -1 },
			"config: providers[1].max_steps must be between 1 and 1000 (got -1; leave it out for 25)"},
		{"huge max_steps", func(p *Provider) { p.MaxSteps = 5000 },
			"config: providers[1].max_steps must be between 1 and 1000 (got 5000; leave it out for 25)"},
		{"user in base_url", func(p *Provider) { p.BaseURL = "https://me:secret@api.example.com/v1" },
			"config: providers[1].base_url must not carry a user or password; put the key in the environment variable named by api_key_env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c.Providers[1])
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	// The openai keys on another type.
	for key, set := range map[string]func(p *Provider){
		"base_url":      func(p *Provider) { p.BaseURL = "http://x/v1" },
		"api_key_env":   func(p *Provider) { p.APIKeyEnv = "K" },
		"max_steps":     func(p *Provider) { p.MaxSteps = 3 },
		"system_prompt": func(p *Provider) { p.SystemPrompt = "x" },
	} {
		c := validConfig()
		set(&c.Providers[0])
		want := "config: providers[0]." + key + " applies only to type openai (this provider is type exec)"
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Errorf("%s on exec: %v, want %q", key, err, want)
		}
	}
}
