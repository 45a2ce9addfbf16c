package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// R18.36: a secret file that cannot be used, or a secret given twice, stops
// `relay serve` / `relay worker` / `relay export` with exit 2 and one line
// that names the flag or variable and never the secret.
func TestSecretFilesExit2(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const token, pass = "secret-owner-token-5a4b3c2d1e", "secret-redis-pass-6f7e8d"
	tokFile, passFile, empty := write("token", token+"\n"), write("pass", pass+"\n"), write("empty", "\n")
	unreadable := write("unreadable", token)
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"missing token file", nil, []string{"serve", "--owner-token-file", missing}, "--owner-token-file: cannot read the owner token: open " + missing},
		{"empty token file", nil, []string{"serve", "--owner-token-file", empty}, "is empty: it must hold the owner token"},
		{"missing env token file", map[string]string{"RELAY_OWNER_TOKEN_FILE": missing}, []string{"serve"}, "RELAY_OWNER_TOKEN_FILE: cannot read the owner token"},
		{"flag and file", nil, []string{"serve", "--owner-token", token, "--owner-token-file", tokFile}, "--owner-token and --owner-token-file are both given"},
		{"env and env file", map[string]string{"RELAY_OWNER_TOKEN": token, "RELAY_OWNER_TOKEN_FILE": tokFile}, []string{"serve"}, "are both set"},
		{"password file without Redis", nil, []string{"serve", "--redis-password-file", passFile}, "--redis-password-file needs a Redis URL"},
		{"URL password and password file", nil, []string{"worker", "--redis", "redis://:" + pass + "@127.0.0.1:1/0", "--redis-password-file", passFile},
			"the Redis URL has a password and --redis-password-file gives one too"},
		{"missing env password file", map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0", "RELAY_REDIS_PASSWORD_FILE": missing}, []string{"worker"},
			"RELAY_REDIS_PASSWORD_FILE: cannot read the Redis password"},
		{"export: URL password and password file", nil, []string{"export", "--redis", "redis://:" + pass + "@127.0.0.1:1/0", "--redis-password-file", passFile},
			"the --redis URL has a password and --redis-password-file gives one too"},
		{"export: missing password file", nil, []string{"export", "--redis", "redis://127.0.0.1:1/0", "--redis-password-file", missing},
			"relay export: --redis-password-file: cannot read the Redis password"},
		{"export: password file without --redis", nil, []string{"export", "--redis-password-file", passFile}, "--redis-password-file needs --redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := tc.args
			if args[0] == "serve" {
				args = append(args, "--addr", "127.0.0.1:0")
			}
			code, out, errOut := runCLI(t, args...)
			if code != 2 {
				t.Fatalf("%v: exit %d, want 2 (stderr %q)", args, code, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("%v: stderr %q lacks %q", args, errOut, tc.want)
			}
			// export warns about the URL's password on a line of its own first.
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			oneLine(t, strings.Join(args, " "), lines[len(lines)-1]+"\n")
			for _, l := range lines[:len(lines)-1] {
				if !strings.Contains(l, "WARNING") {
					t.Errorf("%v: a second line that is no WARNING: %q", args, l)
				}
			}
			if strings.Contains(errOut+out, token) || strings.Contains(errOut+out, pass) {
				t.Errorf("%v: the output shows a secret: %q %q", args, out, errOut)
			}
		})
	}
	if os.Geteuid() != 0 { // root reads a file of mode 0
		code, _, errOut := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--owner-token-file", unreadable)
		if code != 2 || !strings.Contains(errOut, "permission denied") {
			t.Errorf("unreadable token file: exit %d, stderr %q", code, errOut)
		}
	}
}

// R18.36: a worker ignores RELAY_OWNER_TOKEN_FILE as it ignores
// RELAY_OWNER_TOKEN (a compose file sharing one environment): a file it
// cannot read is not its error.
func TestWorkerIgnoresOwnerTokenFile(t *testing.T) {
	cleanEnv(t)
	t.Setenv("RELAY_OWNER_TOKEN_FILE", filepath.Join(t.TempDir(), "missing"))
	code, _, errOut := runCLI(t, "worker")
	if code != 2 || !strings.Contains(errOut, "relay worker needs --redis") {
		t.Fatalf("worker with RELAY_OWNER_TOKEN_FILE set: exit %d, stderr %q", code, errOut)
	}
}

// R18.36: `relay export --redis URL` with a password in the URL says on
// stderr that every user can read it, without the password.
func TestExportWarnsOfPasswordInURL(t *testing.T) {
	cleanEnv(t)
	const pass = "export-pass-1a2b3c4d"
	_, out, errOut := runCLI(t, "export", "--redis", "redis://:"+pass+"@127.0.0.1:1/0") // nothing listens on port 1
	if !strings.Contains(errOut, "relay export: WARNING: the Redis password is on the command line") ||
		!strings.Contains(errOut, "/proc/PID/cmdline") || !strings.Contains(errOut, "--redis-password-file") {
		t.Errorf("no WARNING on stderr: %q", errOut)
	}
	if strings.Contains(out+errOut, pass) {
		t.Errorf("the output shows the password: %q %q", out, errOut)
	}
	_, _, errOut = runCLI(t, "export", "--redis", "redis://127.0.0.1:1/0")
	if strings.Contains(errOut, "WARNING") {
		t.Errorf("a WARNING without a password on the command line: %q", errOut)
	}
}
