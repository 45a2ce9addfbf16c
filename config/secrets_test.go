package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// secretFile writes content to a file of mode 0600 and returns its path.
func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	fileToken = "tok-file-0123456789abcdef"
	flagToken = "tok-flag-0123456789abcdef"
	envToken  = "tok-env-0123456789abcdef"
	filePass  = "pass-from-file-9f8e7d"
)

// TestOwnerTokenFile (R18.36): the owner token comes from --owner-token-file
// or RELAY_OWNER_TOKEN_FILE, its line end dropped; a flag beats the
// environment as for every setting.
func TestOwnerTokenFile(t *testing.T) {
	withHome(t)
	for _, tc := range []struct {
		name  string
		flags map[string]string
		env   map[string]string
		want  string
	}{
		{"flag file", map[string]string{"owner-token-file": secretFile(t, fileToken+"\n")}, nil, fileToken},
		{"flag file, CRLF", map[string]string{"owner-token-file": secretFile(t, fileToken+"\r\n")}, nil, fileToken},
		{"flag file, no newline", map[string]string{"owner-token-file": secretFile(t, fileToken)}, nil, fileToken},
		{"env file", nil, map[string]string{EnvOwnerTokenFile: secretFile(t, fileToken+"\n")}, fileToken},
		{"flag file beats env token", map[string]string{"owner-token-file": secretFile(t, fileToken)},
			map[string]string{EnvOwnerToken: envToken}, fileToken},
		{"flag token beats env file", map[string]string{"owner-token": flagToken},
			map[string]string{EnvOwnerTokenFile: "/does/not/exist"}, flagToken},
		{"empty env file counts as unset", nil, map[string]string{EnvOwnerTokenFile: "", EnvOwnerToken: envToken}, envToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.flags, envOf(tc.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.OwnerToken != tc.want {
				t.Fatalf("owner token %q, want %q", c.OwnerToken, tc.want)
			}
		})
	}
}

// TestSecretFileErrors (R18.36): an unreadable, empty or oversized file, an
// empty path, and a value given together with its file are one-line errors
// that name the source and never the secret.
func TestSecretFileErrors(t *testing.T) {
	withHome(t)
	missing := filepath.Join(t.TempDir(), "missing")
	dir := t.TempDir()
	big := secretFile(t, strings.Repeat("x", 64<<10+1))
	withPass := secretFile(t, filePass+"\n")
	for _, tc := range []struct {
		name  string
		flags map[string]string
		env   map[string]string
		want  []string
	}{
		{"missing flag file", map[string]string{"owner-token-file": missing}, nil, []string{"--owner-token-file", missing, "no such file"}},
		{"missing env file", nil, map[string]string{EnvOwnerTokenFile: missing}, []string{EnvOwnerTokenFile, missing}},
		{"directory", map[string]string{"owner-token-file": dir}, nil, []string{"--owner-token-file", dir}},
		{"empty file", map[string]string{"owner-token-file": secretFile(t, "")}, nil, []string{"--owner-token-file", "is empty"}},
		{"only a newline", map[string]string{"owner-token-file": secretFile(t, "\n")}, nil, []string{"is empty"}},
		{"empty path", map[string]string{"owner-token-file": ""}, nil, []string{"--owner-token-file is empty"}},
		{"larger than 64 KiB", map[string]string{"owner-token-file": big}, nil, []string{"larger than 64 KiB"}},
		{"short token in the file", map[string]string{"owner-token-file": secretFile(t, "short\n")}, nil, []string{"at least 16 characters"}},
		{"flag and flag file", map[string]string{"owner-token": flagToken, "owner-token-file": secretFile(t, fileToken)}, nil,
			[]string{"--owner-token and --owner-token-file are both given"}},
		{"env and env file", nil, map[string]string{EnvOwnerToken: envToken, EnvOwnerTokenFile: secretFile(t, fileToken)},
			[]string{EnvOwnerToken + " and " + EnvOwnerTokenFile + " are both set"}},
		{"redis password file without a Redis URL", map[string]string{"redis-password-file": withPass}, nil,
			[]string{"--redis-password-file needs a Redis URL"}},
		{"redis env password file without a Redis URL", nil, map[string]string{EnvRedisPasswordFile: withPass},
			[]string{EnvRedisPasswordFile + " needs a Redis URL"}},
		{"URL password and password file", map[string]string{"redis": "redis://:urlpass-123@127.0.0.1:6379/0", "redis-password-file": withPass}, nil,
			[]string{"the Redis URL has a password and --redis-password-file gives one too"}},
		{"sentinel URL password and env password file", nil,
			map[string]string{EnvRedis: "redis+sentinel://:urlpass-123@127.0.0.1:26379/m", EnvRedisPasswordFile: withPass},
			[]string{"the Redis URL has a password and " + EnvRedisPasswordFile}},
		{"missing redis password file", map[string]string{"redis": "redis://127.0.0.1:6379/0", "redis-password-file": missing}, nil,
			[]string{"--redis-password-file", "the Redis password", missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.flags, envOf(tc.env))
			if err == nil {
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "config: ") {
				t.Errorf("not one line starting with config: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			for _, secret := range []string{fileToken, flagToken, envToken, filePass, "urlpass-123", "xxxxxxxx"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error shows a secret %q: %q", secret, msg)
				}
			}
		})
	}
}

// TestRedisPasswordFile (R18.36): the password comes from
// --redis-password-file or RELAY_REDIS_PASSWORD_FILE for a URL without one;
// the URL itself stays as given.
func TestRedisPasswordFile(t *testing.T) {
	withHome(t)
	p := secretFile(t, filePass+"\n")
	for _, tc := range []struct {
		name  string
		flags map[string]string
		env   map[string]string
	}{
		{"flag", map[string]string{"redis": "redis://127.0.0.1:6379/0", "redis-password-file": p}, nil},
		{"env", nil, map[string]string{EnvRedis: "redis://default@127.0.0.1:6379/0", EnvRedisPasswordFile: p}},
		{"flag file beats env file", map[string]string{"redis-password-file": p},
			map[string]string{EnvRedis: "redis+cluster://127.0.0.1:7000", EnvRedisPasswordFile: "/does/not/exist"}},
		{"sentinel with its own sentinel_password", nil,
			map[string]string{EnvRedis: "redis+sentinel://127.0.0.1:26379/m?sentinel_password=sp", EnvRedisPasswordFile: p}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.flags, envOf(tc.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.RedisPassword != filePass {
				t.Fatalf("Redis password %q, want %q", c.RedisPassword, filePass)
			}
			if strings.Contains(c.RedisURL, filePass) {
				t.Fatalf("the password went into the URL: %q", c.RedisURL)
			}
		})
	}
}

// TestCommandLineWarnings (R18.36): a secret in a flag (the owner token, a
// Redis URL with a password) gives a WARNING naming /proc/PID/cmdline and the
// file to use instead, never the secret; the same secrets in the environment
// or a file give none.
func TestCommandLineWarnings(t *testing.T) {
	withHome(t)
	for _, tc := range []struct {
		name  string
		flags map[string]string
		env   map[string]string
		want  []string // flags in SecretFlags
		file  string   // the alternative each warning names
	}{
		{"owner token flag", map[string]string{"owner-token": flagToken}, nil, []string{"owner-token"}, "--owner-token-file"},
		{"redis URL flag with password", map[string]string{"redis": "redis://:urlpass-123@127.0.0.1:6379/0"}, nil, []string{"redis"}, "--redis-password-file"},
		{"redis URL flag with sentinel_password", map[string]string{"redis": "redis+sentinel://127.0.0.1:26379/m?sentinel_password=urlpass-123"}, nil,
			[]string{"redis"}, EnvRedisPasswordFile},
		{"both", map[string]string{"owner-token": flagToken, "redis": "rediss://u:urlpass-123@h:6380"}, nil, []string{"owner-token", "redis"}, "_FILE"},
		{"environment", nil, map[string]string{EnvOwnerToken: envToken, EnvRedis: "redis://:urlpass-123@127.0.0.1:6379/0"}, nil, ""},
		{"files", map[string]string{"owner-token-file": secretFile(t, fileToken), "redis": "redis://127.0.0.1:6379/0",
			"redis-password-file": secretFile(t, filePass)}, nil, nil, ""},
		{"redis URL flag without password", map[string]string{"redis": "redis://127.0.0.1:6379/0"}, nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.flags, envOf(tc.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !slices.Equal(c.SecretFlags, tc.want) {
				t.Fatalf("SecretFlags %q, want %q", c.SecretFlags, tc.want)
			}
			ws := c.CommandLineWarnings()
			if len(ws) != len(tc.want) {
				t.Fatalf("%d warnings, want %d: %q", len(ws), len(tc.want), ws)
			}
			for _, w := range ws {
				for _, part := range []string{"WARNING", "every user of this machine can read it", "/proc/PID/cmdline", tc.file} {
					if !strings.Contains(w, part) {
						t.Errorf("warning %q lacks %q", w, part)
					}
				}
				for _, secret := range []string{flagToken, envToken, fileToken, filePass, "urlpass-123"} {
					if strings.Contains(w, secret) {
						t.Errorf("warning shows a secret: %q", w)
					}
				}
			}
		})
	}
}
