package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/oar/relay/redisurl"
)

// maxSecretFile bounds what is read of a secret file: a token or a password
// is short, and a path to a device must not fill the memory.
const maxSecretFile = 64 << 10

// readSecrets reads the owner token and the Redis password from their files
// (R18.36) and notes the flags that carried a secret on the command line.
//
// Flags come before the environment, as for every setting: --owner-token or
// --owner-token-file wins over both variables. Within one of them, the value
// and its file together are an error (which one is meant cannot be told), as
// are a password in the Redis URL and a password file.
func (c *Config) readSecrets(flags map[string]string, env func(string) (string, bool)) error {
	envSet := func(k string) (string, bool) {
		v, ok := env(k)
		return v, ok && v != ""
	}
	if err := c.readOwnerToken(flags, envSet); err != nil {
		return err
	}
	if err := c.readRedisPassword(flags, envSet); err != nil {
		return err
	}
	c.noteSecretFlags(flags)
	return nil
}

// readOwnerToken reads the owner token from --owner-token-file, else (without
// --owner-token) from RELAY_OWNER_TOKEN_FILE; envSet is env with "" as unset.
func (c *Config) readOwnerToken(flags map[string]string, envSet func(string) (string, bool)) error {
	_, tokFlag := flags["owner-token"]
	fileFlag, hasFileFlag := flags["owner-token-file"]
	switch {
	case tokFlag && hasFileFlag:
		return errors.New("config: --owner-token and --owner-token-file are both given: give one (the file keeps the token off the command line)")
	case hasFileFlag:
		return c.readOwnerTokenFile("--owner-token-file", fileFlag)
	case !tokFlag:
		file, hasFile := envSet(EnvOwnerTokenFile)
		if !hasFile {
			return nil
		}
		if _, ok := envSet(EnvOwnerToken); ok {
			return fmt.Errorf("config: %s and %s are both set: set one", EnvOwnerToken, EnvOwnerTokenFile)
		}
		return c.readOwnerTokenFile(EnvOwnerTokenFile, file)
	}
	return nil
}

// readOwnerTokenFile sets the owner token to the contents of file, named by
// source (a flag or a variable).
func (c *Config) readOwnerTokenFile(source, file string) error {
	tok, err := ReadSecretFile(source, "the owner token", file)
	if err != nil {
		return err
	}
	c.OwnerToken = tok
	c.SecretFiles = append(c.SecretFiles, file)
	return nil
}

// readRedisPassword reads the Redis password from --redis-password-file, else
// RELAY_REDIS_PASSWORD_FILE; envSet is env with "" as unset.
func (c *Config) readRedisPassword(flags map[string]string, envSet func(string) (string, bool)) error {
	source, file, hasFile := "--redis-password-file", "", false
	if v, ok := flags["redis-password-file"]; ok {
		file, hasFile = v, true
	} else if v, ok := envSet(EnvRedisPasswordFile); ok {
		source, file, hasFile = EnvRedisPasswordFile, v, true
	}
	if !hasFile {
		return nil
	}
	if c.RedisURL == "" {
		return fmt.Errorf("config: %s needs a Redis URL (--redis / %s): the embedded store has a password of its own", source, EnvRedis)
	}
	u, err := redisurl.Parse(c.RedisURL)
	if err != nil {
		u = nil // Validate says so
	}
	pw, err := RedisPasswordFile(u, "Redis URL", source, file)
	if err != nil {
		return err
	}
	c.RedisPassword = pw
	c.SecretFiles = append(c.SecretFiles, file)
	return nil
}

// noteSecretFlags notes the flags that carried a secret on the command line.
func (c *Config) noteSecretFlags(flags map[string]string) {
	c.SecretFlags = nil
	if v := flags["owner-token"]; v != "" {
		c.SecretFlags = append(c.SecretFlags, "owner-token")
	}
	if v := flags["redis"]; redisurl.HasSecret(v) {
		c.SecretFlags = append(c.SecretFlags, "redis")
	}
}

// ReadSecretFile reads a token or password from path: the file's contents
// without the line ends at its end. An empty path, a file that cannot be read,
// one larger than 64 KiB and an empty one are errors naming source and path,
// never the contents.
func ReadSecretFile(source, what, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("config: %s is empty: give the path of a file holding %s", source, what)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("config: %s: cannot read %s: %w", source, what, err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("config: %s: cannot read %s from %s: %w", source, what, path, err)
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("config: %s: %s is larger than 64 KiB: not a file holding %s", source, path, what)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("config: %s: %s is empty: it must hold %s", source, path, what)
	}
	return s, nil
}

// RedisPasswordFile reads the Redis password from file (source names the
// flag or variable that gave it), for u, a Redis URL (urlName names it in
// the error) that must not have a password of its own (nil: not checked).
func RedisPasswordFile(u *redisurl.URL, urlName, source, file string) (string, error) {
	if u != nil && u.Password() != "" {
		return "", fmt.Errorf("config: the %s has a password and %s gives one too: give one (the URL without its password, and the password in the file)", urlName, source)
	}
	return ReadSecretFile(source, "the Redis password", file)
}

// CommandLineWarnings are the WARNING lines for the secrets SecretFlags
// names (R18.36): each says that every user of the machine can read the
// command line and names the file alternative; none holds the secret.
func (c Config) CommandLineWarnings() []string {
	var out []string
	for _, f := range c.SecretFlags {
		switch f {
		case "owner-token":
			out = append(out, "WARNING: the owner token is on the command line (--owner-token): every user of this machine can read it (/proc/PID/cmdline, ps); use --owner-token-file or "+EnvOwnerTokenFile+" (a file only the relay's user can read), or "+EnvOwnerToken)
		case "redis":
			out = append(out, "WARNING: the Redis password is on the command line (in the --redis URL): every user of this machine can read it (/proc/PID/cmdline, ps); give the URL without its password and the password in --redis-password-file or "+EnvRedisPasswordFile+", or the whole URL in "+EnvRedis)
		}
	}
	return out
}
