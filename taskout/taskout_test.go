package taskout

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestStripANSI(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain text unchanged", "ok  \tgithub.com/x\t0.01s", "ok  \tgithub.com/x\t0.01s"},
		{"unicode kept", "✓ café × ⎯ [×3]", "✓ café × ⎯ [×3]"},
		{"empty", "", ""},
		{"SGR colour", "\x1b[31mFAIL\x1b[0m pkg", "FAIL pkg"},
		{"SGR bold and reset with no params", "\x1b[1m\x1b[32mPASS\x1b[m", "PASS"},
		{"256 and truecolor", "\x1b[38;5;196mred\x1b[38;2;10;20;30m rgb\x1b[0m", "red rgb"},
		{"cursor moves and erase line", "\x1b[2K\x1b[1G\x1b[3Adone\x1b[K", "done"},
		{"private mode CSI", "\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
		{"OSC title ended by BEL", "\x1b]0;my title\x07text", "text"},
		{"OSC 8 hyperlink ended by ST", "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ end", "link end"},
		{"unterminated OSC stops at newline", "\x1b]0;title\nnext", "\nnext"},
		{"charset designation", "\x1b(Bplain\x1b)0", "plain"},
		{"two-byte escapes", "\x1b=\x1b>\x1b7saved\x1b8\x1bM", "saved"},
		{"DCS string", "\x1bPq#0;2;0;0;0\x1b\\after", "after"},
		{"C1 CSI as UTF-8", "\u009b31mred\u009b0m", "red"},
		{"raw 8-bit CSI byte", "\x9b31mred\x9b0m", "red"},
		{"invalid byte dropped", "a\xffb", "ab"},
		{"ESC at end", "text\x1b", "text"},
		{"CSI cut at end", "text\x1b[31", "text"},
		{"carriage return progress keeps last", "Downloading 10%\rDownloading 50%\rDownloading 100%", "Downloading 100%"},
		{"CRLF ending", "line\r", "line"},
		{"several trailing CRs", "line\r\r", "line"},
		{"progress then CRLF", "10%\r100%\r\n", "100%\n"},
		{"spinner with colour", "\x1b[36m⠋\x1b[0m building\r\x1b[32m✓\x1b[0m built", "✓ built"},
		{"CR per line in multi-line string", "a1\ra2\nb1\rb2", "a2\nb2"},
		{"backspace overstrike", "b\bbo\bol\bld", "bold"},
		{"backspace at start ignored", "\bx", "x"},
		{"backspace does not cross newline", "a\n\bb", "a\nb"},
		{"BEL and NUL dropped, tab kept", "a\x07b\x00c\td", "abc\td"},
		{"DEL dropped", "a\x7fb", "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StripANSI(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("StripANSI(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if again := StripANSI(got); again != got {
				t.Errorf("StripANSI not idempotent: %q -> %q", got, again)
			}
		})
	}
}

func TestMask(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		// Authorization header values.
		{"authorization bearer", "Authorization: Bearer abc", "Authorization: ***"},
		{"authorization lower-case basic", "authorization: basic dXNlcjpwYXNz", "authorization: ***"},
		{"authorization in curl -v", "> Authorization: Bearer eyJhbGciOi.eyJzdWIi.c2ln", "> Authorization: ***"},
		{"authorization in quoted curl header", `curl -H "Authorization: Bearer abc123" https://api.example.com/v1`, `curl -H "Authorization: ***" https://api.example.com/v1`},
		{"authorization in single-quoted header", `curl -H 'Authorization: token ghp_x1' -d '{}'`, `curl -H 'Authorization: ***' -d '{}'`},
		{"authorization JSON", `{"Authorization": "Bearer abc", "Accept": "json"}`, `{"Authorization": "***", "Accept": "json"}`},
		{"authorization python dict", `{'Authorization': 'Basic Zm9v', 'Host': 'x'}`, `{'Authorization': '***', 'Host': 'x'}`},
		{"authorization go http.Header", "map[Accept:[*/*] Authorization:[Bearer abc]]", "map[Accept:[*/*] Authorization:[***]]"},
		{"proxy-authorization", "Proxy-Authorization: Basic eHl6", "Proxy-Authorization: ***"},
		{"authorization AWS SigV4", "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240101/us-east-1/s3/aws4_request, Signature=abc", "Authorization: ***"},
		{"authorization trailing spaces kept", "Authorization: Bearer abc  ", "Authorization: ***  "},

		// Bearer tokens anywhere.
		{"bearer token in text", "retrying with Bearer abc.def-123 now", "retrying with Bearer *** now"},
		{"bearer lower-case jwt", "using bearer eyJhbGciOiJIUzI1NiJ9.e30.sig for call", "using bearer *** for call"},
		{"bearer long letters-only token", "Bearer abcdefghijklmnopqrstuvwxyz", "Bearer ***"},
		{"bearer base64 padding", "Bearer dG9rZW4=", "Bearer ***"},

		// key=value secrets.
		{"password=", "password=secret", "password=***"},
		{"password= in flag", "mysql --user=root --password=hunter2 db", "mysql --user=root --password=*** db"},
		{"prefixed env var", "DB_PASSWORD=hunter2", "DB_PASSWORD=***"},
		{"password colon", "password: hunter2", "password: ***"},
		{"password JSON", `{"user":"bob","password":"x y z"}`, `{"user":"bob","password":"***"}`},
		{"password JSON spaced", `"password": "x"`, `"password": "***"`},
		{"password single quotes with escape", `password='it\'s'`, `password='***'`},
		{"password ruby hash rocket", `:password => 'x'`, `:password => '***'`},
		{"passwd=", "passwd=abc", "passwd=***"},
		{"pwd=", "pwd=abc", "pwd=***"},
		{"passphrase", "passphrase: correct-horse", "passphrase: ***"},
		{"token=", "token=abc", "token=***"},
		{"token in query string", "GET /cb?code=1&access_token=abc123&expires=3600", "GET /cb?code=1&access_token=***&expires=3600"},
		{"GITHUB_TOKEN", "export GITHUB_TOKEN=ghp_abc123", "export GITHUB_TOKEN=***"},
		{"token with scheme word", "token: Bearer abc", "token: ***"},
		{"X-Auth-Token header", "X-Auth-Token: abc", "X-Auth-Token: ***"},
		{"secret=", "secret=abc", "secret=***"},
		{"client_secret quoted", "client_secret='s3cr3t'", "client_secret='***'"},
		{"camelCase clientSecret", `clientSecret: "s3cr3t"`, `clientSecret: "***"`},
		{"api_key=", "api_key=abc", "api_key=***"},
		{"apikey=", "apikey=abc", "apikey=***"},
		{"X-Api-Key header", "X-Api-Key: abc", "X-Api-Key: ***"},
		{"apiKey JSON", `{"apiKey": "k-123"}`, `{"apiKey": "***"}`},
		{"private_key JSON with PEM", `"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----\n",`, `"private_key": "***",`},
		{"several on one line", "user=bob password=a token=b mode=x", "user=bob password=*** token=*** mode=x"},
		{"value ends at comma", "password=abc, user=bob", "password=***, user=bob"},
		{"upper case key", "PASSWORD = hunter2", "PASSWORD = ***"},

		// AWS.
		{"aws access key id", "AKIAIOSFODNN7EXAMPLE", "***"},
		{"aws session key id in text", "key id ASIAY34FZKBOKMUTVV7A used", "key id *** used"},
		{"aws_access_key_id value", "aws_access_key_id=AKIAIOSFODNN7EXAMPLE", "aws_access_key_id=***"},
		{"aws_secret_access_key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = ***"},
		{"AWS_SECRET_ACCESS_KEY env", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=***"},

		// URLs with credentials.
		{"postgres url", "connecting to postgres://admin:s3cret@db:5432/app", "connecting to postgres://admin:***@db:5432/app"},
		{"url password with @", "https://user:p@ss@host/x", "https://user:***@host/x"},
		{"url with empty user", "redis://:pw@localhost:6379/0", "redis://:***@localhost:6379/0"},
		{"git clone with token", "git clone https://oauth2:glpat-abc@gitlab.com/x.git", "git clone https://oauth2:***@gitlab.com/x.git"},

		// Private keys written on one line.
		{"inline PEM", "KEY=-----BEGIN RSA PRIVATE KEY-----MIIEow-----END RSA PRIVATE KEY-----", "KEY=-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----"},
		{"inline PEM without end", "-----BEGIN OPENSSH PRIVATE KEY-----b3BlbnNzaC1rZXk", "-----BEGIN OPENSSH PRIVATE KEY-----***"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Mask(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Mask(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if again := Mask(got); again != got {
				t.Errorf("Mask not idempotent: %q -> %q", got, again)
			}
		})
	}
}

func TestMaskKeepsNonSecrets(t *testing.T) {
	lines := []string{
		"password reset test passed",
		"Password reset link sent to bob",
		"--- PASS: TestPasswordReset (0.00s)",
		"=== RUN   TestTokenRefresh/expired_token",
		"test tests::token::secret_ok ... ok",
		"tests/test_token.py::test_expiry PASSED                    [ 50%]",
		"secret_test.go:12: checking rotation",
		`token := os.Getenv("TOKEN")`,
		"if token == nil {",
		"if secret =~ /x/",
		"max_tokens=4096",
		"tokens: 1500 used",
		"passwords: 3 rotated",
		"password_length=12",
		"api_key_id=42",
		`{"token_type": "bearer", "expires_in": 3600}`,
		"PWD=/home/user/project",
		"OLDPWD=/tmp",
		"password:",
		`password=""`,
		"the bearer of bad news",
		"Bearer authentication required",
		"authorization failed for user bob",
		"Authorization header missing",
		"--- FAIL: TestAuthorization (0.01s)",
		"http://localhost:8080/path?x=1",
		"ssh://git@github.com/org/repo.git",
		"mail bob@example.com:25",
		"AKIA1234",
		"AKIAIOSFODNN7EXAMPLEXYZ",
		"akiaiosfodnn7example",
		"-----BEGIN PUBLIC KEY-----MIIBIjANBgkqh",
		"-----BEGIN CERTIFICATE-----",
		"-----BEGIN RSA PRIVATE KEY-----",
		"-----END RSA PRIVATE KEY-----",
		"Authorization: ***",
		"password=***",
		"postgres://admin:***@db/app",
		"ok  \tgithub.com/oar/relay/taskout\t0.012s",
	}
	for _, l := range lines {
		t.Run(l, func(t *testing.T) {
			if got := Mask(l); got != l {
				t.Errorf("Mask(%q) = %q, want it unchanged", l, got)
			}
		})
	}
}

func TestMaskBlock(t *testing.T) {
	tests := []struct {
		name     string
		in, want []string
	}{
		{
			name: "rsa block",
			in:   []string{"key:", "-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA", "q83vEjI0VnLx", "-----END RSA PRIVATE KEY-----", "done"},
			want: []string{"key:", "-----BEGIN RSA PRIVATE KEY-----", "***", "***", "-----END RSA PRIVATE KEY-----", "done"},
		},
		{
			name: "two blocks of several kinds",
			in: []string{
				"-----BEGIN OPENSSH PRIVATE KEY-----", "b3Bl", "-----END OPENSSH PRIVATE KEY-----",
				"between",
				"-----BEGIN ENCRYPTED PRIVATE KEY-----", "MIIF", "-----END ENCRYPTED PRIVATE KEY-----",
			},
			want: []string{
				"-----BEGIN OPENSSH PRIVATE KEY-----", "***", "-----END OPENSSH PRIVATE KEY-----",
				"between",
				"-----BEGIN ENCRYPTED PRIVATE KEY-----", "***", "-----END ENCRYPTED PRIVATE KEY-----",
			},
		},
		{
			name: "pgp block with header and blank line",
			in:   []string{"-----BEGIN PGP PRIVATE KEY BLOCK-----", "Version: 1", "", "lQOYBF", "-----END PGP PRIVATE KEY BLOCK-----"},
			want: []string{"-----BEGIN PGP PRIVATE KEY BLOCK-----", "***", "***", "***", "-----END PGP PRIVATE KEY BLOCK-----"},
		},
		{
			name: "indented yaml block",
			in:   []string{"tls:", "  key: |", "    -----BEGIN EC PRIVATE KEY-----", "    MHcCAQEE", "    -----END EC PRIVATE KEY-----"},
			want: []string{"tls:", "  key: |", "    -----BEGIN EC PRIVATE KEY-----", "***", "    -----END EC PRIVATE KEY-----"},
		},
		{
			name: "unterminated block masks the rest",
			in:   []string{"-----BEGIN PRIVATE KEY-----", "MIIE", "more", "still key"},
			want: []string{"-----BEGIN PRIVATE KEY-----", "***", "***", "***"},
		},
		{
			name: "prefixed lines as in docker compose logs",
			in:   []string{"app-1  | -----BEGIN RSA PRIVATE KEY-----", "app-1  | MIIEow", "app-1  | -----END RSA PRIVATE KEY-----", "app-1  | ready"},
			want: []string{"app-1  | -----BEGIN RSA PRIVATE KEY-----", "***", "app-1  | -----END RSA PRIVATE KEY-----", "app-1  | ready"},
		},
		{
			name: "text after BEGIN is not a block",
			in:   []string{`expected "-----BEGIN RSA PRIVATE KEY-----" prefix`, "next line", "-----BEGIN PRIVATE KEY-----MIIE", "more"},
			want: []string{`expected "-----BEGIN RSA PRIVATE KEY-----" prefix`, "next line", "-----BEGIN PRIVATE KEY-----MIIE", "more"},
		},
		{
			name: "trailing spaces after BEGIN still a block",
			in:   []string{"-----BEGIN PRIVATE KEY-----  ", "MIIE", "-----END PRIVATE KEY-----"},
			want: []string{"-----BEGIN PRIVATE KEY-----  ", "***", "-----END PRIVATE KEY-----"},
		},
		{
			name: "one-line key is left to Mask",
			in:   []string{"-----BEGIN PRIVATE KEY-----MIIE-----END PRIVATE KEY-----", "next"},
			want: []string{"-----BEGIN PRIVATE KEY-----MIIE-----END PRIVATE KEY-----", "next"},
		},
		{
			name: "public key and certificate blocks kept",
			in:   []string{"-----BEGIN PUBLIC KEY-----", "MIIBIjAN", "-----END PUBLIC KEY-----", "-----BEGIN CERTIFICATE-----", "MIIDdz", "-----END CERTIFICATE-----"},
			want: []string{"-----BEGIN PUBLIC KEY-----", "MIIBIjAN", "-----END PUBLIC KEY-----", "-----BEGIN CERTIFICATE-----", "MIIDdz", "-----END CERTIFICATE-----"},
		},
		{
			name: "no key",
			in:   []string{"a", "b"},
			want: []string{"a", "b"},
		},
		{
			name: "empty",
			in:   nil,
			want: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			got := MaskBlock(in)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("MaskBlock mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.in, in); diff != "" {
				t.Errorf("MaskBlock modified its input (-was +now):\n%s", diff)
			}
		})
	}
}

func TestFold(t *testing.T) {
	tests := []struct {
		name     string
		in, want []string
	}{
		{"nil", nil, []string{}},
		{"single", []string{"a"}, []string{"a"}},
		{"pair", []string{"a", "a"}, []string{"a [×2]"}},
		{"not consecutive", []string{"a", "b", "a"}, []string{"a", "b", "a"}},
		{"runs", []string{"x", "y", "y", "y", "z", "z"}, []string{"x", "y [×3]", "z [×2]"}},
		{"empty lines", []string{"", "", ""}, []string{" [×3]"}},
		{"two digits", slices.Repeat([]string{"retry"}, 12), []string{"retry [×12]"}},
		{"case and spaces differ", []string{"a", "A", "a "}, []string{"a", "A", "a "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			got := Fold(in)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Fold mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.in, in); diff != "" {
				t.Errorf("Fold modified its input (-was +now):\n%s", diff)
			}
		})
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		name          string
		raw           []string
		n             int
		want          []string
		wantTruncated bool
	}{
		{"last n", []string{"1", "2", "3", "4", "5"}, 3, []string{"3", "4", "5"}, true},
		{"all fit", []string{"1", "2"}, 5, []string{"1", "2"}, false},
		{"exact fit", []string{"1", "2"}, 2, []string{"1", "2"}, false},
		{"n counts folded lines", []string{"a", "b", "b", "b", "c"}, 2, []string{"b [×3]", "c"}, true},
		{"fold at the start not truncated", []string{"b", "b", "c"}, 2, []string{"b [×2]", "c"}, false},
		{"run at the end", []string{"x", "y", "y"}, 1, []string{"y [×2]"}, true},
		{"colour differences fold", []string{"\x1b[32mok\x1b[0m", "ok"}, 5, []string{"ok [×2]"}, false},
		{"masked lines fold", []string{"token=a", "token=b"}, 5, []string{"token=*** [×2]"}, false},
		{"secret masked", []string{"Authorization: Bearer abc"}, 5, []string{"Authorization: ***"}, false},
		{"progress collapsed", []string{"Downloading 10%\rDownloading 50%\rDownloading 100%"}, 5, []string{"Downloading 100%"}, false},
		{"CRLF", []string{"line\r", "line"}, 5, []string{"line [×2]"}, false},
		{"trailing spaces trimmed", []string{"a  ", "a\t"}, 5, []string{"a [×2]"}, false},
		{"multi-line elements split", []string{"a\nb\n", "c"}, 5, []string{"a", "b", "c"}, false},
		{"empty lines kept", []string{"a", "", "b"}, 5, []string{"a", "", "b"}, false},
		{
			"private key block",
			[]string{"-----BEGIN RSA PRIVATE KEY-----", "MIIE", "abcd", "-----END RSA PRIVATE KEY-----", "done"},
			10,
			[]string{"-----BEGIN RSA PRIVATE KEY-----", "*** [×2]", "-----END RSA PRIVATE KEY-----", "done"},
			false,
		},
		{
			"key block begun before the tail",
			[]string{"-----BEGIN PRIVATE KEY-----", "k1", "k2", "k3", "k4", "k5", "-----END PRIVATE KEY-----"},
			2,
			[]string{"*** [×5]", "-----END PRIVATE KEY-----"},
			true,
		},
		{
			"coloured key block",
			[]string{"\x1b[33m-----BEGIN PRIVATE KEY-----\x1b[0m", "\x1b[33mMIIE\x1b[0m", "\x1b[33m-----END PRIVATE KEY-----\x1b[0m"},
			10,
			[]string{"-----BEGIN PRIVATE KEY-----", "***", "-----END PRIVATE KEY-----"},
			false,
		},
		{"n zero", []string{"a"}, 0, []string{}, true},
		{"n negative", []string{"a"}, -1, []string{}, true},
		{"no output", nil, 5, []string{}, false},
		{"no output n zero", nil, 0, []string{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := slices.Clone(tt.raw)
			got, truncated := Tail(raw, tt.n)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Tail(%q, %d) mismatch (-want +got):\n%s", tt.raw, tt.n, diff)
			}
			if truncated != tt.wantTruncated {
				t.Errorf("Tail(%q, %d) truncated = %v, want %v", tt.raw, tt.n, truncated, tt.wantTruncated)
			}
			if diff := cmp.Diff(tt.raw, raw); diff != "" {
				t.Errorf("Tail modified its input (-was +now):\n%s", diff)
			}
		})
	}
}

// TestTailMatchesFold checks the lazy backward folding of Tail against the
// plain definition: clean all, fold all, keep the last n.
func TestTailMatchesFold(t *testing.T) {
	raw := []string{
		"\x1b[32mstart\x1b[0m", "a", "a", "token=1", "token=2", "b", "",
		"", "-----BEGIN PRIVATE KEY-----", "x", "y", "-----END PRIVATE KEY-----",
		"c\r", "c", "10%\r100%", "100%", "d",
	}
	var cleaned []string
	for _, r := range raw {
		cleaned = append(cleaned, strings.TrimRight(StripANSI(r), " \t"))
	}
	cleaned = MaskBlock(cleaned)
	for i := range cleaned {
		cleaned[i] = Mask(cleaned[i])
	}
	all := Fold(cleaned)
	for n := 0; n <= len(all)+1; n++ {
		t.Run(strings.Repeat("n", n+1), func(t *testing.T) {
			want := all[max(len(all)-n, 0):]
			got, truncated := Tail(raw, n)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Tail(raw, %d) mismatch (-want +got):\n%s", n, diff)
			}
			if wantTr := n < len(all); truncated != wantTr {
				t.Errorf("Tail(raw, %d) truncated = %v, want %v", n, truncated, wantTr)
			}
		})
	}
}

func TestParseCounts(t *testing.T) {
	c := func(runner string, p, f, s int, final bool) *Counts {
		return &Counts{Runner: runner, Passed: p, Failed: f, Skipped: s, Final: final}
	}
	tests := []struct {
		name  string
		lines []string
		want  *Counts
	}{
		// go test
		{"go running", []string{"=== RUN   TestA"}, c(RunnerGo, 0, 0, 0, false)},
		{"go results without close", []string{"--- PASS: TestA (0.00s)", "--- FAIL: TestB (0.01s)", "--- SKIP: TestC (0.00s)"}, c(RunnerGo, 1, 1, 1, false)},
		{"go ok closes", []string{"--- PASS: TestA (0.00s)", "PASS", "ok  \tgithub.com/x/y\t0.012s"}, c(RunnerGo, 1, 0, 0, true)},
		{"go bare PASS is final", []string{"--- PASS: TestA (0.00s)", "PASS"}, c(RunnerGo, 1, 0, 0, true)},
		{"go bare FAIL is final", []string{"--- FAIL: TestA (0.00s)", "FAIL"}, c(RunnerGo, 0, 1, 0, true)},
		{"go ok cached alone", []string{"ok  \tgithub.com/x/y\t(cached)"}, c(RunnerGo, 0, 0, 0, true)},
		{"go ok with coverage", []string{"ok  \tgithub.com/x/y\t0.1s\tcoverage: 80.0% of statements"}, c(RunnerGo, 0, 0, 0, true)},
		{"go ok pkg without duration inside a run", []string{"--- PASS: TestA (0.00s)", "ok  github.com/x/y"}, c(RunnerGo, 1, 0, 0, true)},
		{"go FAIL pkg without duration inside a run", []string{"=== RUN   TestA", "FAIL github.com/x/y"}, c(RunnerGo, 0, 1, 0, true)},
		{"go no test files", []string{"?   \tgithub.com/x/z\t[no test files]"}, c(RunnerGo, 0, 0, 0, true)},
		{
			"go leaf subtests counted, passing parent not",
			[]string{"--- PASS: TestT (0.00s)", "    --- PASS: TestT/a (0.00s)", "    --- PASS: TestT/b (0.00s)", "        --- SKIP: TestT/b/deep (0.00s)"},
			c(RunnerGo, 1, 0, 1, false),
		},
		{
			"go failing subtest counted once",
			[]string{"--- FAIL: TestT (0.00s)", "    --- FAIL: TestT/two (0.00s)", "    --- PASS: TestT/one (0.00s)", "FAIL", "FAIL\tgithub.com/x/y\t0.01s"},
			c(RunnerGo, 1, 1, 0, true),
		},
		{
			"go parent failing on its own counts",
			[]string{"--- FAIL: TestP (0.00s)", "    --- PASS: TestP/x (0.00s)", "    --- PASS: TestP/y (0.00s)"},
			c(RunnerGo, 2, 1, 0, false),
		},
		{
			"go packages add up and final follows the last line",
			[]string{"--- PASS: TestA (0.00s)", "ok  \tm/a\t0.1s", "=== RUN   TestB", "--- PASS: TestB (0.00s)"},
			c(RunnerGo, 2, 0, 0, false),
		},
		{
			"go two packages closed",
			[]string{"--- PASS: TestA (0.00s)", "ok  \tm/a\t0.1s", "--- FAIL: TestA (0.00s)", "FAIL\tm/b\t0.2s", "FAIL"},
			c(RunnerGo, 1, 1, 0, true),
		},
		{"go same test name in two packages", []string{"--- PASS: TestA (0.00s)", "ok  \tm/a\t0.1s", "--- PASS: TestA (0.00s)", "ok  \tm/b\t0.1s"}, c(RunnerGo, 2, 0, 0, true)},
		{"go build failure counts one", []string{"# m/d", "d/d_test.go:5:28: undefined: x", "FAIL\tm/d [build failed]", "FAIL"}, c(RunnerGo, 0, 1, 0, true)},
		{"go setup failure counts one", []string{"FAIL\tm/d [setup failed]"}, c(RunnerGo, 0, 1, 0, true)},
		{"go FAIL pkg without test lines counts one", []string{"panic: init", "FAIL\tm/d\t0.01s"}, c(RunnerGo, 0, 1, 0, true)},
		{"go folded result line", []string{"--- PASS: TestFlaky (0.00s) [×3]", "ok  \tm/a\t0.1s"}, c(RunnerGo, 3, 0, 0, true)},
		{"go coloured lines", []string{"\x1b[32m--- PASS: TestA (0.00s)\x1b[0m", "\x1b[31m--- FAIL: TestB (0.00s)\x1b[0m"}, c(RunnerGo, 1, 1, 0, false)},
		{"gotestsum DONE", []string{"DONE 12 tests, 1 skipped, 2 failures in 3.2s"}, c(RunnerGo, 9, 2, 1, true)},
		{"gotestsum DONE all pass", []string{"DONE 5 tests in 0.512s"}, c(RunnerGo, 5, 0, 0, true)},
		{"gotestsum DONE one failure and runs", []string{"DONE 2 runs, 12 tests, 1 failure in 1.000s"}, c(RunnerGo, 11, 1, 0, true)},
		{"gotestsum DONE build error", []string{"DONE 0 tests, 1 error in 0.2s"}, c(RunnerGo, 0, 1, 0, true)},
		{"gotestsum DONE replaces running counts", []string{"--- FAIL: TestA (0.00s)", "=== FAIL: m/a TestA (0.00s)", "DONE 3 tests, 1 failure in 0.1s"}, c(RunnerGo, 2, 1, 0, true)},
		{"gotestsum then a new go run", []string{"DONE 3 tests in 0.1s", "=== RUN   TestA"}, c(RunnerGo, 0, 0, 0, false)},

		// pytest
		{"pytest summary", []string{"===== 412 passed, 2 failed, 3 skipped in 12.3s ====="}, c(RunnerPytest, 412, 2, 3, true)},
		{"pytest summary every word", []string{"==== 1 failed, 33 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error, 2 warnings, 4 deselected in 0.04s ===="}, c(RunnerPytest, 34, 2, 2, true)},
		{"pytest summary errors plural", []string{"=== 2 errors in 0.10s ==="}, c(RunnerPytest, 0, 2, 0, true)},
		{"pytest summary long run", []string{"=== 5 passed in 125.50s (0:02:05) ==="}, c(RunnerPytest, 5, 0, 0, true)},
		{"pytest summary quiet", []string{"2 failed, 10 passed in 0.50s"}, c(RunnerPytest, 10, 2, 0, true)},
		{"pytest summary old seconds", []string{"=== 3 passed in 0.12 seconds ==="}, c(RunnerPytest, 3, 0, 0, true)},
		{"pytest no tests ran", []string{"============ no tests ran in 0.01s ============"}, c(RunnerPytest, 0, 0, 0, true)},
		{"pytest session start", []string{"============================= test session starts =============================="}, c(RunnerPytest, 0, 0, 0, false)},
		{
			"pytest progress",
			[]string{"=== test session starts ===", "collected 9 items", "", "tests/test_a.py ..F.s [ 55%]", "tests/test_b.py .xEX                    [100%]"},
			c(RunnerPytest, 5, 2, 2, false),
		},
		{"pytest quiet progress continuation", []string{"..F.....s                   [ 50%]", "........                    [100%]"}, c(RunnerPytest, 15, 1, 1, false)},
		{
			"pytest verbose",
			[]string{"tests/test_a.py::test_ok PASSED     [ 25%]", "tests/test_a.py::test_bad FAILED    [ 50%]", "tests/test_a.py::test_s SKIPPED (later) [ 75%]", "tests/test_a.py::test_p[a b] XFAIL  [100%]"},
			c(RunnerPytest, 1, 1, 2, false),
		},
		{"pytest xdist", []string{"[gw0] [ 50%] PASSED tests/test_a.py::test_x", "[gw1] [100%] FAILED tests/test_a.py::test_y"}, c(RunnerPytest, 1, 1, 0, false)},
		{"pytest short summary lines not counted", []string{"tests/a.py .F [100%]", "FAILED tests/a.py::test_b - assert 1 == 2"}, c(RunnerPytest, 1, 1, 0, false)},
		{
			"pytest second session replaces first",
			[]string{"=== test session starts ===", "=== 3 passed in 0.1s ===", "=== test session starts ===", "tests/a.py F [100%]"},
			c(RunnerPytest, 0, 1, 0, false),
		},
		{"pytest coloured summary", []string{"\x1b[31m===== \x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m3 passed\x1b[0m\x1b[31m in 0.08s\x1b[0m\x1b[31m =====\x1b[0m"}, c(RunnerPytest, 3, 1, 0, true)},

		// vitest
		{"vitest summary", []string{"      Tests  2 failed | 412 passed (414)"}, c(RunnerVitest, 412, 2, 0, true)},
		{"vitest summary unindented", []string{"Tests  2 failed | 412 passed (414)"}, c(RunnerVitest, 412, 2, 0, true)},
		{"vitest summary skipped and todo", []string{" Tests  412 passed | 3 skipped | 1 todo (416)"}, c(RunnerVitest, 412, 0, 4, true)},
		{"vitest start", []string{" RUN  v1.6.0 /home/x/proj"}, c(RunnerVitest, 0, 0, 0, false)},
		{
			"vitest file lines",
			[]string{" RUN  v4.1.12 /p", " ✓ src/a.test.ts (3 tests) 5ms", " ❯ src/b.test.ts (4 tests | 1 failed | 1 skipped) 9ms", "     × b > fails 2ms", " ↓ src/c.test.ts (2 tests | 2 skipped)"},
			c(RunnerVitest, 5, 1, 3, false),
		},
		{
			"vitest verbose test lines",
			[]string{" RUN  v4.1.12 /p", " ✓ a.test.ts > math > adds 2ms", " × a.test.ts > math > fails 7ms", " ↓ a.test.ts > math > skipped", " □ a.test.ts > math > later"},
			c(RunnerVitest, 1, 1, 2, false),
		},
		{
			"vitest file lines win over nested test lines",
			[]string{" ❯ a.test.ts (2 tests | 1 failed) 9ms", " × a.test.ts > fails 2ms"},
			c(RunnerVitest, 1, 1, 0, false),
		},
		{"vitest test files line", []string{" Test Files  1 passed (1)"}, c(RunnerVitest, 0, 0, 0, false)},
		{"vitest rerun starts over", []string{" Tests  3 passed (3)", " RERUN  src/a.test.ts x1"}, c(RunnerVitest, 0, 0, 0, false)},

		// jest
		{"jest summary", []string{"Tests:       2 failed, 1 skipped, 412 passed, 415 total"}, c(RunnerJest, 412, 2, 1, true)},
		{"jest summary todo", []string{"Tests:       1 failed, 1 skipped, 1 todo, 3 passed, 6 total"}, c(RunnerJest, 3, 1, 2, true)},
		{"jest summary all passed", []string{"Tests:       5 passed, 5 total"}, c(RunnerJest, 5, 0, 0, true)},
		{"jest file line", []string{"FAIL src/app.test.ts (5.2 s)"}, c(RunnerJest, 0, 0, 0, false)},
		{
			"jest verbose running",
			[]string{"PASS src/a.test.js", "  math", "    ✓ adds (2 ms)", "    ✕ fails (2 ms)", "    ○ skipped skipped", "    ✎ todo later"},
			c(RunnerJest, 1, 1, 2, false),
		},
		{"jest suites line", []string{"Test Suites: 1 failed, 1 passed, 2 total"}, c(RunnerJest, 0, 0, 0, false)},
		{"jest new run after summary", []string{"Tests:       5 passed, 5 total", "PASS src/a.test.js", "    ✓ adds (2 ms)"}, c(RunnerJest, 1, 0, 0, false)},

		// cargo test
		{"cargo result", []string{"test result: FAILED. 412 passed; 2 failed; 3 ignored; 0 measured; 0 filtered out; finished in 1.20s"}, c(RunnerCargo, 412, 2, 3, true)},
		{"cargo running", []string{"running 3 tests", "test a ... ok", "test b ... FAILED", "test c ... ignored, needs network"}, c(RunnerCargo, 1, 1, 1, false)},
		{
			"cargo binaries summed",
			[]string{
				"running 2 tests", "test a ... ok", "test b ... ok", "", "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
				"     Running tests/it.rs (target/debug/deps/it-1)", "", "running 1 test", "test c ... FAILED", "", "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
			},
			c(RunnerCargo, 2, 1, 0, true),
		},
		{
			"cargo next binary makes it running",
			[]string{"test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s", "   Doc-tests mycrate", "", "running 1 test", "test src/lib.rs - add (line 3) ... ok"},
			c(RunnerCargo, 3, 0, 0, false),
		},
		{
			"cargo second invocation after Finished",
			[]string{
				"test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
				"    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.02s",
				"     Running unittests src/lib.rs (target/debug/deps/x-1)", "running 1 test", "test z ... ok",
			},
			c(RunnerCargo, 1, 0, 0, false),
		},
		{"cargo doc test with spaces", []string{"test src/lib.rs - add (line 3) ... ok"}, c(RunnerCargo, 1, 0, 0, false)},

		// plain
		{"plain", []string{"3 passed, 1 failed"}, c(RunnerPlain, 3, 1, 0, true)},
		{"plain with skipped", []string{"3 passed, 1 failed, 2 skipped"}, c(RunnerPlain, 3, 1, 2, true)},
		{"plain with word", []string{"tests: 3 passed, 1 failed"}, c(RunnerPlain, 3, 1, 0, true)},
		{"plain with word no space", []string{"e2e:3 passed, 0 failed, 1 skipped"}, c(RunnerPlain, 3, 0, 1, true)},
		{"plain capitalised", []string{"Results: 3 Passed, 1 Failed"}, c(RunnerPlain, 3, 1, 0, true)},

		// several runs: the last one wins
		{"go then plain", []string{"--- PASS: TestA (0.00s)", "ok  \tm/a\t0.1s", "tests: 7 passed, 0 failed"}, c(RunnerPlain, 7, 0, 0, true)},
		{"pytest then cargo", []string{"=== 3 passed in 0.1s ===", "running 1 test", "test a ... ok"}, c(RunnerCargo, 1, 0, 0, false)},
		{"plain then go", []string{"3 passed, 1 failed", "=== RUN   TestA"}, c(RunnerGo, 0, 0, 0, false)},
		{"two plain lines", []string{"3 passed, 1 failed", "4 passed, 0 failed"}, c(RunnerPlain, 4, 0, 0, true)},
		{"output after a run keeps it", []string{"=== 3 passed in 0.1s ===", "Done.", "$ exit 0"}, c(RunnerPytest, 3, 0, 0, true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseCounts(tt.lines)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseCounts(%q) mismatch (-want +got):\n%s", tt.lines, diff)
			}
		})
	}
}

func TestParseCountsNotATestRun(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
	}{
		{"nil", nil},
		{"empty lines", []string{"", "  "}},
		{"build log", []string{"Compiling foo v0.1.0", "    Finished `dev` profile [unoptimized] target(s) in 1.2s", "     Running `target/debug/foo`"}},
		{"go-like text without duration", []string{"    --- PASS: is what we print"}},
		{"ok alone", []string{"ok"}},
		{"TAP ok line", []string{"ok 1 - adds numbers"}},
		{"ok pkg without duration outside a go run", []string{"ok  github.com/x/y"}},
		{"FAIL word outside a go run", []string{"FAIL something"}},
		{"bare PASS outside go", []string{"PASS"}},
		{"bare FAIL outside go", []string{"FAIL"}},
		{"RUN without name", []string{"=== RUN"}},
		{"DONE without tests", []string{"DONE in 3s"}},
		{"pytest words unknown", []string{"5 apples in 3s"}},
		{"pytest-like without number", []string{"tests passed in 3s"}},
		{"jest symbol outside jest", []string{"    ✓ adds (2 ms)"}},
		{"jest summary with unknown word", []string{"Tests:       2 apples, 2 total"}},
		{"vitest summary with unknown word", []string{"      Tests  2 apples (2)"}},
		{"cargo-like sentence", []string{"test this ... later"}},
		{"cargo result without numbers", []string{"test result: ok"}},
		{"plain indented", []string{"  3 passed, 1 failed"}},
		{"plain two words before", []string{"summary of run: 3 passed, 1 failed"}},
		{"plain trailing period", []string{"3 passed, 1 failed."}},
		{"plain only passed", []string{"3 passed"}},
		{"plain reversed order", []string{"1 failed, 3 passed"}},
		{"plain with errors", []string{"x: 3 passed, 1 failed, 2 skipped, 4 errors"}},
		{"plain in a sentence", []string{"we saw 3 passed, 1 failed"}},
		{"prose", []string{"password reset test passed", "all tests passed!", "2 failed attempts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseCounts(tt.lines); got != nil {
				t.Errorf("ParseCounts(%q) = %+v, want nil", tt.lines, got)
			}
		})
	}
}

// readTestdata returns the lines of a real runner's output in testdata/.
func readTestdata(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// before returns the lines before the first one whose cleaned text contains
// marker, or starts with it when marker begins with "^".
func before(t *testing.T, lines []string, marker string) []string {
	t.Helper()
	for i, l := range lines {
		l = StripANSI(l)
		if prefix, ok := strings.CutPrefix(marker, "^"); ok && strings.HasPrefix(l, prefix) ||
			!ok && strings.Contains(l, marker) {
			return lines[:i]
		}
	}
	t.Fatalf("marker %q not found", marker)
	return nil
}

// TestParseCountsTestdata runs the parser on real output captured from each
// runner (see testdata/README.md), whole and cut before its summary.
func TestParseCountsTestdata(t *testing.T) {
	c := func(runner string, p, f, s int, final bool) *Counts {
		return &Counts{Runner: runner, Passed: p, Failed: f, Skipped: s, Final: final}
	}
	tests := []struct {
		file    string
		cutAt   string // "" for the whole file
		want    *Counts
		comment string
	}{
		{"gotest_verbose.txt", "", c(RunnerGo, 7, 3, 1, true), "leaves: a has 5 passed, 3 failed (one a parent failing itself), 1 skipped; b has 2 passed"},
		{"gotest_verbose.txt", "=== RUN   TestParentFailsItself", c(RunnerGo, 3, 2, 1, false), "before the last test of package a"},
		{"gotest_plain.txt", "", c(RunnerGo, 0, 3, 0, true), "only failures are printed without -v"},
		{"gotest_pass.txt", "", c(RunnerGo, 2, 0, 0, true), ""},
		{"gotest_pass.txt", "^PASS", c(RunnerGo, 2, 0, 0, false), "deep subtest is the leaf"},
		{"gotest_buildfail.txt", "", c(RunnerGo, 0, 1, 0, true), ""},
		{"pytest_default.txt", "", c(RunnerPytest, 33, 2, 2, true), "error counts as failed, xfailed as skipped"},
		{"pytest_default.txt", "= ERRORS =", c(RunnerPytest, 33, 2, 2, false), "progress characters"},
		{"pytest_verbose.txt", "", c(RunnerPytest, 33, 2, 2, true), ""},
		{"pytest_verbose.txt", "= ERRORS =", c(RunnerPytest, 33, 2, 2, false), "verbose lines"},
		{"pytest_quiet.txt", "", c(RunnerPytest, 33, 2, 2, true), ""},
		{"pytest_quiet.txt", "= ERRORS =", c(RunnerPytest, 33, 2, 2, false), ""},
		{"pytest_color.txt", "", c(RunnerPytest, 33, 2, 2, true), ""},
		{"vitest_default.txt", "", c(RunnerVitest, 3, 1, 2, true), "todo counts as skipped"},
		{"vitest_default.txt", "Test Files", c(RunnerVitest, 3, 1, 2, false), "per-file lines"},
		{"vitest_verbose.txt", "", c(RunnerVitest, 3, 1, 2, true), ""},
		{"vitest_verbose.txt", "Failed Tests", c(RunnerVitest, 3, 1, 2, false), "per-test lines"},
		{"vitest_color.txt", "", c(RunnerVitest, 3, 1, 2, true), ""},
		{"jest_default.txt", "", c(RunnerJest, 3, 1, 2, true), ""},
		{"jest_default.txt", "Test Suites:", c(RunnerJest, 0, 0, 0, false), "no per-test lines without --verbose"},
		{"jest_verbose.txt", "", c(RunnerJest, 3, 1, 2, true), ""},
		{"jest_verbose.txt", "Test Suites:", c(RunnerJest, 3, 1, 2, false), "per-test lines"},
		{"cargo_nofailfast.txt", "", c(RunnerCargo, 5, 1, 2, true), "lib, integration and doc tests summed"},
		{"cargo_nofailfast.txt", "Running tests/it.rs", c(RunnerCargo, 2, 1, 2, true), "after the first binary"},
		{"cargo_nofailfast.txt", "test result: ok. 2 passed", c(RunnerCargo, 4, 1, 2, false), "inside the second binary"},
		{"cargo_fail.txt", "", c(RunnerCargo, 2, 1, 2, true), "stops at the first failing binary"},
		{"cargo_color.txt", "", c(RunnerCargo, 5, 1, 2, true), ""},
	}
	for _, tt := range tests {
		name := tt.file
		if tt.cutAt != "" {
			name += " before " + tt.cutAt
		}
		t.Run(name, func(t *testing.T) {
			lines := readTestdata(t, tt.file)
			if tt.cutAt != "" {
				lines = before(t, lines, tt.cutAt)
			}
			got := ParseCounts(lines)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseCounts mismatch (%s) (-want +got):\n%s", tt.comment, diff)
			}
		})
	}
}

// TestTailTestdata checks Tail on real coloured output: no escape is left,
// the end is kept, and counts still parse from the folded tail.
func TestTailTestdata(t *testing.T) {
	tests := []struct {
		file string
		n    int
		want []string
	}{
		{"cargo_color.txt", 4, []string{
			"",
			"all doctests ran in 0.19s; merged doctests compilation took 0.19s",
			"error: 1 target failed:",
			"    `--lib`",
		}},
		{"vitest_color.txt", 5, []string{
			" Test Files  1 failed | 1 passed (2)",
			"      Tests  1 failed | 3 passed | 1 skipped | 1 todo (6)",
			"   Start at  08:51:35",
			"   Duration  432ms (transform 45ms, setup 0ms, import 67ms, tests 11ms, environment 0ms)",
			"",
		}},
		{"pytest_color.txt", 1, []string{
			"========= 1 failed, 33 passed, 1 skipped, 1 xfailed, 1 error in 0.08s ==========",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			lines := readTestdata(t, tt.file)
			got, truncated := Tail(lines, tt.n)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Tail mismatch (-want +got):\n%s", diff)
			}
			if !truncated {
				t.Error("truncated = false, want true")
			}
			all, _ := Tail(lines, len(lines))
			for _, l := range all {
				if strings.ContainsAny(l, "\x1b\r") {
					t.Errorf("escape left in %q", l)
				}
			}
			if c := ParseCounts(all); c == nil || !c.Final {
				t.Errorf("ParseCounts(folded tail) = %+v, want a final run", c)
			}
		})
	}
}

// TestConcurrentUse runs the functions from several goroutines (for -race).
func TestConcurrentUse(t *testing.T) {
	lines := readTestdata(t, "gotest_verbose.txt")
	want := ParseCounts(lines)
	wantTail, _ := Tail(lines, 10)
	for i := 0; i < 8; i++ {
		t.Run(strings.Repeat("g", i+1), func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(want, ParseCounts(lines)); diff != "" {
				t.Errorf("ParseCounts mismatch (-want +got):\n%s", diff)
			}
			got, _ := Tail(lines, 10)
			if diff := cmp.Diff(wantTail, got); diff != "" {
				t.Errorf("Tail mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// bigOutput is a long verbose go test run with some noise.
func bigOutput(n int) []string {
	lines := make([]string, 0, 3*n)
	for i := 0; i < n; i++ {
		name := "TestCase" + strings.Repeat("x", i%7)
		lines = append(lines, "=== RUN   "+name, "    \x1b[2mlog line with token=abc and some text\x1b[0m", "--- PASS: "+name+" (0.00s)")
	}
	return append(lines, "PASS", "ok  \tm/a\t1.0s")
}

func BenchmarkTail(b *testing.B) {
	lines := bigOutput(50000)
	b.ResetTimer()
	for b.Loop() {
		Tail(lines, 500)
	}
}

func BenchmarkParseCounts(b *testing.B) {
	lines := bigOutput(50000)
	b.ResetTimer()
	for b.Loop() {
		ParseCounts(lines)
	}
}

// Found by FuzzMaskSecret: a credential key written as the value of an earlier
// key keeps its own value masked too.
func TestMaskKeyInsideValue(t *testing.T) {
	for _, in := range []string{"GITHUB_TOKEN: PASSWORD: hunter2", "token: client_secret: hunter2"} {
		if out := Mask(in); strings.Contains(out, "hunter2") {
			t.Errorf("Mask(%q) = %q", in, out)
		}
	}
}

// Found by FuzzCleanLine: absurd counts never overflow into negatives.
func TestParseCountsHuge(t *testing.T) {
	line := "test result: ok. 9223372036854775807 passed; 0 failed; 0 ignored; 0 measured"
	c := ParseCounts([]string{line, line, line})
	if c == nil || c.Passed < 0 || c.Failed < 0 {
		t.Fatalf("counts %+v", c)
	}
}

// EscapeEnd finds the end of the escape sequence that starts at an index, as
// StripANSI parses it (the relay's line values use it, R18.16).
func TestEscapeEnd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		i    int
		want int
	}{
		{"plain", 0, 0},
		{"\x1b[31mred", 0, 5},
		{"ab\x1b[0m", 2, 6},
		{"\x1b]0;title\x07rest", 0, 10},
		{"\x1b]8;;u\x1b\\link", 0, 8},
		{"\x1bc!", 0, 2},
		{"\u009b2Jx", 0, 4},
		{"\x9b2Jx", 0, 3},
		{"\u009dtitle\u009cx", 0, 9},
		{"\x1b", 0, 1},
		{"é", 0, 0},
		{"x", 5, 5},
	}
	for _, c := range cases {
		if got := EscapeEnd(c.in, c.i); got != c.want {
			t.Errorf("EscapeEnd(%q, %d) = %d, want %d", c.in, c.i, got, c.want)
		}
	}
}
