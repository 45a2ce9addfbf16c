package config

import (
	"fmt"
)

// flagEnv maps each flag name (without dashes) to its environment variable.
var flagEnv = []struct{ flag, env string }{
	{"addr", EnvAddr},
	{"redis", EnvRedis},
	{"name", EnvName},
	{"config", EnvConfig},
	{"owner-token", EnvOwnerToken},
	{"owner-token-file", EnvOwnerTokenFile},
	{"redis-password-file", EnvRedisPasswordFile},
	{"metrics-addr", EnvMetricsAddr},
	{"public-url", EnvPublicURL},
	{"data-dir", EnvDataDir},
}

// Load builds the configuration with precedence defaults < YAML file <
// environment < flags, fills derived defaults and validates the result.
//
// flags holds only the flags the user set explicitly, keyed by flag name
// without dashes ("addr", "redis", "name", "config", "owner-token",
// "metrics-addr"); an explicitly set flag wins even when it is empty. env is
// a lookup such as os.LookupEnv; an environment variable set to "" counts as
// unset. The YAML file is flags["config"], else RELAY_CONFIG, else none.
// The owner token and the Redis password may come from files
// (owner-token-file, redis-password-file and their variables: readSecrets).
func Load(flags map[string]string, env func(string) (string, bool)) (Config, error) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	for k := range flags {
		if !knownFlag(k) {
			return Config{}, fmt.Errorf("config: unknown flag %q", k)
		}
	}
	c := Default()
	if err := c.loadConfigFile(flags, env); err != nil {
		return Config{}, err
	}
	c.applyEnvAndFlags(flags, env)
	if err := c.readSecrets(flags, env); err != nil {
		return Config{}, err
	}

	c.fillDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// loadConfigFile reads the YAML file named by the config flag, else by
// RELAY_CONFIG, over the defaults; none is read when neither names one.
func (c *Config) loadConfigFile(flags map[string]string, env func(string) (string, bool)) error {
	if v, ok := flags["config"]; ok {
		c.ConfigPath = v
	} else if v, ok := env(EnvConfig); ok && v != "" {
		c.ConfigPath = v
	}
	if c.ConfigPath == "" {
		return nil
	}
	homeCwd := c.DefaultCwd
	if err := loadFile(c, c.ConfigPath); err != nil {
		return err
	}
	// folders without default_cwd: the default folder is the first of
	// them, not the home directory the defaults started from.
	if c.DefaultCwd == homeCwd && !Inside(c.Folders, c.DefaultCwd) {
		c.DefaultCwd = ""
	}
	return nil
}

// applyEnvAndFlags sets the plain settings from the environment, then from
// the flags, which win.
func (c *Config) applyEnvAndFlags(flags map[string]string, env func(string) (string, bool)) {
	targets := map[string]*string{
		"addr":         &c.Addr,
		"redis":        &c.RedisURL,
		"name":         &c.Name,
		"owner-token":  &c.OwnerToken,
		"metrics-addr": &c.MetricsAddr,
		"public-url":   &c.PublicURL,
		"data-dir":     &c.DataDir,
	}
	for _, fe := range flagEnv {
		p, ok := targets[fe.flag]
		if !ok {
			continue // config: loadConfigFile; the secret files: readSecrets
		}
		if v, ok := env(fe.env); ok && v != "" {
			*p = v
		}
		if v, ok := flags[fe.flag]; ok {
			*p = v
		}
	}
}

func knownFlag(k string) bool {
	for _, fe := range flagEnv {
		if fe.flag == k {
			return true
		}
	}
	return false
}
