package relaytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oar/relay/store"
)

// R18.36 with real `relay serve` processes: the owner token and the Redis
// password read from files, and the WARNING a secret on the command line
// draws (the command line is readable by every user: /proc/PID/cmdline).

// writeSecret writes content to a new file of mode 0600.
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secretProc starts `relay serve` with args (after --addr and --config) and
// env, waits until it is ready and returns its API, output and pid; the
// process is killed when the test ends (its output logged on failure).
func secretProc(t *testing.T, label, cfg string, args, env []string) (*Relay, *syncBuffer, *child) {
	t.Helper()
	addr := freeAddr(t)
	c, out := &child{}, &syncBuffer{}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("---- output of %s (%s) ----\n%s", label, addr, out.String())
		}
	})
	cmd := exec.Command(peerRelayBinary(t), append([]string{"serve", "--addr", addr, "--config", cfg}, args...)...)
	cmd.Env = relayEnv(env...)
	took := runServe(t, c, cmd, out, label, "http://"+addr)
	t.Logf("%s ready after %s", label, took.Round(time.Millisecond))
	return &Relay{tb: t, URL: "http://" + addr}, out, c
}

// procCmdline is what every user of the machine reads of a process's command line.
func procCmdline(t *testing.T, c *child) string {
	t.Helper()
	cmd := c.running()
	if cmd == nil {
		t.Fatal("the process is not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// stopClean ends the process with SIGTERM and requires exit status 0.
func stopClean(t *testing.T, c *child, label string) {
	t.Helper()
	if ran, exit, err := c.stop(30 * time.Second); err != nil || !ran || exit != nil {
		t.Fatalf("%s: clean stop: ran %v, exit %v, %v", label, ran, exit, err)
	}
}

// cmdlineWarning is the part of the R18.36 WARNING every such line has.
const cmdlineWarning = "every user of this machine can read it (/proc/PID/cmdline, ps)"

// TestOwnerTokenFileProcess (R18.36): `relay serve --owner-token-file F`
// and RELAY_OWNER_TOKEN_FILE=F serve the owner API with the token in F (its
// newline dropped), generate none, and leave the token out of the command
// line and the log. `--owner-token T` still works but logs the WARNING
// (naming the file alternative, never the token): T is in
// /proc/PID/cmdline, which this test reads as any user could.
func TestOwnerTokenFileProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` processes")
	}
	t.Parallel()
	cfg := embConfig(t, t.TempDir())
	token := "file-owner-token-" + store.NewID(12)
	tokFile := writeSecret(t, token+"\n")
	for _, tc := range []struct {
		name      string
		args, env []string
		onCmdline bool // the token is on the command line: WARNING
	}{
		{name: "--owner-token-file", args: []string{"--owner-token-file", tokFile}},
		{name: "RELAY_OWNER_TOKEN_FILE", env: []string{"RELAY_OWNER_TOKEN_FILE=" + tokFile}},
		{name: "--owner-token", args: []string{"--owner-token", token}, onCmdline: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--data-dir", filepath.Join(t.TempDir(), "data")}, tc.args...)
			api, out, c := secretProc(t, tc.name, cfg, args, tc.env)
			if st := api.do("GET", "/api/v1/settings", token, nil, nil); st != http.StatusOK {
				t.Fatalf("owner API with the token: %d, want 200", st)
			}
			if st := api.do("GET", "/api/v1/settings", "wrong-"+token, nil, nil); st != http.StatusUnauthorized {
				t.Fatalf("owner API with a wrong token: %d, want 401", st)
			}
			cmdline := procCmdline(t, c)
			stopClean(t, c, tc.name)
			log := out.String()
			if strings.Contains(log, "generated an owner token") {
				t.Errorf("the relay generated an owner token although one was configured")
			}
			if strings.Contains(log, token) {
				t.Errorf("the log shows the owner token")
			}
			warned := strings.Contains(log, "WARNING") && strings.Contains(log, cmdlineWarning)
			if tc.onCmdline {
				if !strings.Contains(cmdline, token) {
					t.Fatalf("the token is not in /proc/PID/cmdline: %q", cmdline)
				}
				if !warned || !strings.Contains(log, "--owner-token-file or RELAY_OWNER_TOKEN_FILE") || !strings.Contains(log, "level=WARN") {
					t.Errorf("--owner-token: no WARNING naming /proc/PID/cmdline and --owner-token-file in the log:\n%s", log)
				}
			} else {
				if strings.Contains(cmdline, token) {
					t.Errorf("the token is on the command line: %q", cmdline)
				}
				if warned {
					t.Errorf("a command-line WARNING without a secret on the command line:\n%s", log)
				}
			}
		})
	}
}

// passwordRedis is a redis-server of the test's own with requirepass (its
// config file, not its command line, holds the password), on a free port.
func passwordRedis(t *testing.T, password string) int {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed: %v", err)
	}
	port := freeLoopbackPort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "redis.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nrequirepass %s\nsave \"\"\nappendonly no\ndir %s\n", port, password, dir)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, out := &child{}, &syncBuffer{}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("redis-server output:\n%s", out.String())
		}
	})
	cmd := exec.Command("redis-server", conf)
	cmd.Stdout, cmd.Stderr = out, out
	if _, err := c.run(cmd); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Password: password, MaxRetries: -1})
	defer func() { _ = rc.Close() }()
	Eventually(t, 15*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return rc.Ping(ctx).Err() == nil
	}, "redis-server on port %d to answer", port)
	return port
}

// failedStart runs `relay serve` that must not start: it returns the exit
// code and output (the test fails if it still runs after 60 s).
func failedStart(t *testing.T, cfg string, args, env []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, peerRelayBinary(t), append([]string{"serve", "--addr", freeAddr(t), "--config", cfg}, args...)...)
	cmd.Env = relayEnv(env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) {
		t.Fatalf("relay serve %v: %v (it should have exited)\n%s", args, err, out)
	}
	return ee.ExitCode(), string(out)
}

// TestRedisPasswordFileProcess (R18.36): against a redis-server that
// requires a password, `relay serve` with the URL alone is refused
// (NOAUTH), with RELAY_REDIS_PASSWORD_FILE (or --redis-password-file) it
// serves and its data lands in that Redis, with a wrong password in the file
// it is refused (WRONGPASS); the password never reaches the log or the
// command line. The password inside a --redis URL works but logs the WARNING
// naming the file alternative, without the password.
func TestRedisPasswordFileProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("real `relay serve` and redis-server processes")
	}
	if EmbeddedMode() {
		t.Skipf("%s=embedded: the test runs its own redis-server (the real-Redis pass runs it)", StoreEnv)
	}
	t.Parallel()
	password := "redis-pass-" + store.NewID(12)
	port := passwordRedis(t, password)
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	passFile := writeSecret(t, password+"\n")
	token := "file-owner-token-" + store.NewID(12)
	tokFile := writeSecret(t, token+"\n")
	cfg := embConfig(t, t.TempDir())
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Password: password})
	t.Cleanup(func() { _ = rc.Close() })

	t.Run("no password", func(t *testing.T) {
		code, out := failedStart(t, cfg, []string{"--redis", url, "--owner-token-file", tokFile}, nil)
		if code != 1 || !strings.Contains(out, "NOAUTH") {
			t.Fatalf("without the password: exit %d, want 1 with NOAUTH:\n%s", code, out)
		}
	})
	t.Run("wrong password in the file", func(t *testing.T) {
		code, out := failedStart(t, cfg, []string{"--redis", url, "--owner-token-file", tokFile},
			[]string{"RELAY_REDIS_PASSWORD_FILE=" + writeSecret(t, "not-"+password+"\n")})
		if code != 1 || !strings.Contains(out, "WRONGPASS") {
			t.Fatalf("with a wrong password: exit %d, want 1 with WRONGPASS:\n%s", code, out)
		}
	})
	for i, tc := range []struct {
		name      string
		args, env []string
		onCmdline bool
	}{
		{name: "RELAY_REDIS_PASSWORD_FILE", args: []string{"--redis", url, "--owner-token-file", tokFile},
			env: []string{"RELAY_REDIS_PASSWORD_FILE=" + passFile}},
		{name: "--redis-password-file", args: []string{"--redis", url, "--redis-password-file", passFile},
			env: []string{"RELAY_OWNER_TOKEN_FILE=" + tokFile}},
		{name: "password in --redis", args: []string{"--redis", fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", password, port), "--owner-token-file", tokFile},
			onCmdline: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, out, c := secretProc(t, tc.name, cfg, tc.args, tc.env)
			title := fmt.Sprintf("secret-%d-%s", i, store.NewID(6))
			var s map[string]any
			if st := api.do("POST", "/api/v1/sessions", token, map[string]any{"title": title}, &s); st != http.StatusCreated {
				t.Fatalf("new session: %d %v", st, s)
			}
			id, _ := s["id"].(string)
			if id == "" {
				t.Fatalf("new session without id: %v", s)
			}
			// The relay's data is in the password-protected Redis.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var found bool
			iter := rc.Scan(ctx, 0, "*"+id+"*", 1000).Iterator()
			for iter.Next(ctx) {
				found = true
			}
			if err := iter.Err(); err != nil || !found {
				t.Fatalf("no key of session %s in the Redis on port %d (err %v)", id, port, err)
			}
			cmdline := procCmdline(t, c)
			stopClean(t, c, tc.name)
			log := out.String()
			if strings.Contains(log, password) {
				t.Errorf("the log shows the Redis password")
			}
			warned := strings.Contains(log, "WARNING") && strings.Contains(log, cmdlineWarning)
			if tc.onCmdline {
				if !strings.Contains(cmdline, password) {
					t.Fatalf("the password is not in /proc/PID/cmdline: %q", cmdline)
				}
				if !warned || !strings.Contains(log, "--redis-password-file or RELAY_REDIS_PASSWORD_FILE") {
					t.Errorf("password in --redis: no WARNING naming /proc/PID/cmdline and the password file:\n%s", log)
				}
			} else {
				if strings.Contains(cmdline, password) {
					t.Errorf("the password is on the command line: %q", cmdline)
				}
				if warned {
					t.Errorf("a command-line WARNING without a secret on the command line:\n%s", log)
				}
			}
		})
	}
}
