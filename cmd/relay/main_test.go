package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// cleanEnv keeps the caller's environment (REDIS_URL in CI, RELAY_*) out of run: a
// configuration that unexpectedly passed would otherwise start a relay on that Redis.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"REDIS_URL", "RELAY_ADDR", "RELAY_NAME", "RELAY_CONFIG", "RELAY_OWNER_TOKEN",
		"RELAY_METRICS_ADDR", "RELAY_KEY_PREFIX", "RELAY_PUBLIC_URL", "RELAY_OWNER_TOKEN_FILE", "RELAY_REDIS_PASSWORD_FILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("RELAY_DATA_DIR", t.TempDir()) // never the owner's own data directory
}

// runCLI runs the command line in-process and returns its exit code, stdout and stderr.
// A run that does not return within 20 s fails the test (it would be serving).
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, &stdout, &stderr) }()
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("relay %v did not return within 20 s", args)
		return 0, "", ""
	}
}

// oneLine fails unless s is exactly one line.
func oneLine(t *testing.T, what, s string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") || strings.TrimSpace(s) == "" {
		t.Fatalf("%s: want exactly one line, got %q", what, s)
	}
}

func TestHelp(t *testing.T) {
	cleanEnv(t)
	code, out, errOut := runCLI(t, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"serve", "worker"} {
		if !regexp.MustCompile(`(?m)^\s+` + want + `\s`).MatchString(out) {
			t.Errorf("--help does not list the %s command:\n%s", want, out)
		}
	}
}

// SPEC §2 and R18.7: every flag with its environment variable; each command lists only the
// flags it uses (serve: --addr, --public-url, --owner-token; worker: --metrics-addr).
func TestSubcommandHelpListsFlags(t *testing.T) {
	cleanEnv(t)
	common := map[string]string{"--redis": "REDIS_URL", "--name": "RELAY_NAME", "--config": "RELAY_CONFIG"}
	addrFlag := regexp.MustCompile(`(?m)^\s+--addr\s`)

	code, out, errOut := runCLI(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help exit %d, stderr %q", code, errOut)
	}
	if !addrFlag.MatchString(out) || !strings.Contains(out, "RELAY_ADDR") || !strings.Contains(out, `"127.0.0.1:7420"`) {
		t.Errorf("serve --help lacks --addr (RELAY_ADDR, default 127.0.0.1:7420):\n%s", out)
	}
	for flag, env := range common {
		if !regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(flag)+`\s`).MatchString(out) || !strings.Contains(out, env) {
			t.Errorf("serve --help lacks %s (%s):\n%s", flag, env, out)
		}
	}

	code, out, errOut = runCLI(t, "worker", "--help")
	if code != 0 {
		t.Fatalf("worker --help exit %d, stderr %q", code, errOut)
	}
	if addrFlag.MatchString(out) {
		t.Errorf("worker --help lists --addr:\n%s", out)
	}
	for flag, env := range common {
		if !regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(flag)+`\s`).MatchString(out) || !strings.Contains(out, env) {
			t.Errorf("worker --help lacks %s (%s):\n%s", flag, env, out)
		}
	}
}

func TestBadFlagExit2(t *testing.T) {
	cleanEnv(t)
	for _, args := range [][]string{
		{"serve", "--bogus"},
		{"worker", "--bogus"},
		{"worker", "--addr", "127.0.0.1:0"}, // worker takes every flag but --addr
		{"serve", "--log-format", "xml"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errOut)
			continue
		}
		oneLine(t, strings.Join(args, " "), errOut)
		if out != "" {
			t.Errorf("%v: stdout %q, want nothing", args, out)
		}
	}
}

// SPEC §14: an unknown key is an error naming the key and the nearest known one.
func TestBadConfigExit2(t *testing.T) {
	cleanEnv(t)
	path := filepath.Join(t.TempDir(), "relay.yaml")
	yaml := "name: desk\nsettings:\n  max_wait_seconds: 900\ntiming:\n  peer_poll: 3s\n  coalesec: 10s\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"serve", "worker"} {
		code, _, errOut := runCLI(t, mode, "--config", path)
		if code != 2 {
			t.Fatalf("%s with a bad config: exit %d, want 2 (stderr %q)", mode, code, errOut)
		}
		oneLine(t, mode+" bad config", errOut)
		if !strings.Contains(errOut, "coalesec") || !strings.Contains(errOut, "coalesce") || !strings.Contains(errOut, path) {
			t.Fatalf("%s: error %q should name the file, the key and the suggestion", mode, errOut)
		}
	}
	// Through the environment too.
	t.Setenv("RELAY_CONFIG", path)
	if code, _, errOut := runCLI(t, "serve"); code != 2 || !strings.Contains(errOut, "coalesec") {
		t.Fatalf("RELAY_CONFIG with a bad file: exit %d %q", code, errOut)
	}
}

func TestInvalidAddrExit2(t *testing.T) {
	cleanEnv(t)
	for _, addr := range []string{"nonsense", "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:http-alt!"} {
		code, _, errOut := runCLI(t, "serve", "--addr", addr)
		if code != 2 {
			t.Errorf("--addr %q: exit %d, want 2 (stderr %q)", addr, code, errOut)
			continue
		}
		oneLine(t, "--addr "+addr, errOut)
		if !strings.Contains(errOut, "addr") {
			t.Errorf("--addr %q: error %q does not name addr", addr, errOut)
		}
	}
	// Through the environment as well.
	t.Setenv("RELAY_ADDR", "nonsense")
	if code, _, errOut := runCLI(t, "serve"); code != 2 || !strings.Contains(errOut, "addr") {
		t.Errorf("RELAY_ADDR=nonsense: exit %d %q", code, errOut)
	}
}

// An address of the right shape that this host cannot listen on (TEST-NET-1, RFC 5737) is a
// bad flag as well (SPEC §2: exit 2 with one line).
func TestUnlistenableAddrExit2(t *testing.T) {
	cleanEnv(t)
	code, _, errOut := runCLI(t, "serve", "--addr", "192.0.2.1:7420", "--owner-token", "x-test-token-0123456789")
	if code != 2 {
		t.Fatalf("--addr 192.0.2.1:7420: exit %d, want 2 (stderr %q)", code, errOut)
	}
	if !strings.Contains(errOut, "192.0.2.1:7420") {
		t.Fatalf("error %q does not name the address", errOut)
	}
}

// R18.8: an owner token shorter than 16 characters is a bad flag (exit 2, one line).
func TestShortOwnerTokenExit2(t *testing.T) {
	cleanEnv(t)
	code, _, errOut := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--owner-token", "change-me")
	if code != 2 || !strings.Contains(errOut, "at least 16 characters") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("--owner-token change-me: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("RELAY_OWNER_TOKEN", "short")
	if code, _, errOut := runCLI(t, "serve", "--addr", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "at least 16 characters") {
		t.Fatalf("RELAY_OWNER_TOKEN=short: exit %d, stderr %q", code, errOut)
	}
}

// R21.1: a bad Redis URL (any form) exits 2 with one line that hides the password.
func TestBadRedisURLExits2(t *testing.T) {
	cleanEnv(t)
	for _, u := range []string{"redis+cluster://:hunter2@n1:7000/3", "redis+sentinel://:hunter2@s1:26379", "localhost:6379", "redis+cluster://n1:port"} {
		for _, mode := range []string{"serve", "worker"} {
			args := []string{mode, "--redis", u}
			if mode == "serve" {
				args = append(args, "--addr", "127.0.0.1:0")
			}
			code, _, errOut := runCLI(t, args...)
			if code != 2 || !strings.Contains(errOut, "redis") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || strings.Contains(errOut, "hunter2") {
				t.Errorf("%s --redis %s: exit %d, stderr %q", mode, u, code, errOut)
			}
		}
		code, _, errOut := runCLI(t, "export", "--redis", u)
		if code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || strings.Contains(errOut, "hunter2") {
			t.Errorf("export --redis %s: exit %d, stderr %q", u, code, errOut)
		}
	}
}

// R18.7: a worker without Redis exits 2; each command's --help lists only its flags; `relay version`.
func TestWorkerNeedsRedisHelpAndVersion(t *testing.T) {
	cleanEnv(t)
	code, _, errOut := runCLI(t, "worker")
	if code != 2 || !strings.Contains(errOut, "relay worker needs --redis or REDIS_URL") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("worker without Redis: exit %d, stderr %q", code, errOut)
	}
	_, serveHelp, _ := runCLI(t, "serve", "--help")
	_, workerHelp, _ := runCLI(t, "worker", "--help")
	for _, f := range []string{"--addr", "--public-url", "--owner-token", "--redis", "--log-level"} {
		if !strings.Contains(serveHelp, f) {
			t.Errorf("serve --help lacks %s", f)
		}
	}
	if strings.Contains(serveHelp, "--metrics-addr") {
		t.Errorf("serve --help lists the worker-only --metrics-addr")
	}
	for _, f := range []string{"--addr", "--public-url", "--owner-token"} {
		if strings.Contains(workerHelp, f+" ") {
			t.Errorf("worker --help lists the serve-only %s", f)
		}
	}
	if !strings.Contains(workerHelp, "--metrics-addr") || !strings.Contains(workerHelp, "--redis") {
		t.Errorf("worker --help lacks its flags:\n%s", workerHelp)
	}
	if code, out, _ := runCLI(t, "version"); code != 0 || !strings.HasPrefix(out, "relay ") {
		t.Fatalf("relay version: exit %d %q", code, out)
	}
	if code, _, errOut := runCLI(t, "serve", "--log-level", "loud"); code != 2 || !strings.Contains(errOut, "--log-level") {
		t.Fatalf("--log-level loud: exit %d %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "serve", "--public-url", "relay.example.com"); code != 2 || !strings.Contains(errOut, "public-url") {
		t.Fatalf("--public-url without scheme: exit %d %q", code, errOut)
	}
}

// R18.8: the compose file has no fallback owner token and publishes the API on loopback only.
func TestComposeRequiresOwnerToken(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, "RELAY_OWNER_TOKEN: ${RELAY_OWNER_TOKEN:?") {
		t.Errorf("docker-compose.yml does not require RELAY_OWNER_TOKEN (${RELAY_OWNER_TOKEN:?…})")
	}
	if strings.Contains(s, "RELAY_OWNER_TOKEN:-") || strings.Contains(s, "change-me") {
		t.Errorf("docker-compose.yml still has a fallback owner token")
	}
	if !strings.Contains(s, `"${RELAY_PUBLISH:-127.0.0.1}:7420:7420"`) {
		t.Errorf("docker-compose.yml publishes the API beyond loopback by default")
	}
}

// Issue 20 item 7: compose runs Redis with a password that has no default,
// and every relay process reaches it with that password.
func TestComposeRedisNeedsPassword(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	redisSvc, ok := doc.Services["redis"]
	if !ok {
		t.Fatal("docker-compose.yml has no redis service")
	}
	if !strings.Contains(strings.Join(redisSvc.Command, " "), "--requirepass") ||
		!strings.HasPrefix(redisSvc.Environment["REDIS_PASSWORD"], "${RELAY_REDIS_PASSWORD:?") {
		t.Errorf("redis runs without a required password: command %q, REDIS_PASSWORD %q", redisSvc.Command, redisSvc.Environment["REDIS_PASSWORD"])
	}
	for name, svc := range doc.Services {
		if u, ok := svc.Environment["REDIS_URL"]; ok && !strings.HasPrefix(u, "redis://:${RELAY_REDIS_PASSWORD:?") {
			t.Errorf("service %s reaches Redis without the password: REDIS_URL %q", name, u)
		}
	}
}

// Issue 20 item 7: the systemd units in docs/OPERATIONS.md set file and
// memory limits and sandbox the service.
func TestSystemdUnitsHardened(t *testing.T) {
	b, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	units := regexp.MustCompile("(?s)```ini\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	n := 0
	for _, u := range units {
		if !strings.Contains(u[1], "[Service]") {
			continue
		}
		n++
		for _, want := range []string{"LimitNOFILE=", "MemoryMax=", "NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectSystem=",
			"ProtectKernelTunables=yes", "ProtectControlGroups=yes", "RestrictSUIDSGID=yes"} {
			if !strings.Contains(u[1], want) {
				t.Errorf("a systemd unit in docs/OPERATIONS.md lacks %s:\n%s", want, u[1])
			}
		}
	}
	if n < 2 {
		t.Fatalf("docs/OPERATIONS.md has %d systemd units, want the serve and the worker unit", n)
	}
}
