package taskout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCleanLine runs one chunk of raw task output through the text rules one
// by one: StripANSI, Mask (per line, as Tail applies it), MaskBlock, Fold and
// ParseCounts.
//
// Properties: no panic, and
//   - StripANSI leaves no ESC, no other control byte but tab and newline (so
//     no carriage return), no C1 control and no invalid UTF-8; it keeps every
//     newline, never grows the text and is idempotent;
//   - Mask keeps a line without a hint of a secret as it is, never adds a
//     newline, and is idempotent (as its comment promises);
//   - MaskBlock returns as many lines, each the input line or "***";
//   - Fold returns each run of equal lines as that line, or that line plus
//     " [×N]" with N the run's length;
//   - ParseCounts names a known runner and, when no number in the input has
//     more than 6 digits, never counts below zero.
func FuzzCleanLine(f *testing.F) {
	for _, s := range []string{
		"\x1b[31mFAIL\x1b[0m pkg",
		"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ end",
		"Downloading 10%\rDownloading 100%\r\n",
		"b\bbo\bol\bld\n\x9b31mred\x9b0m\n\u009d0;t\u009c",
		"a\xffb\x00c\x07\x7f\td \n",
		"mysql --user=root --password=hunter2 db",
		`curl -H "Authorization: Bearer abc123" https://api.example.com/v1`,
		"connecting to postgres://admin:s3cret@db:5432/app AKIAIOSFODNN7EXAMPLE",
		"x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\ny",
		"KEY=-----BEGIN PRIVATE KEY-----abc",
		"=== RUN   TestA\n--- PASS: TestA (0.00s)\nok  \tpkg\t0.1s",
		"--- FAIL: TestA/sub (0.00s) [×3]\nFAIL\tpkg\t0.2s",
		"running 2 tests\ntest a ... ok\ntest b ... FAILED\ntest result: FAILED. 1 passed; 1 failed; 0 ignored;",
		"===== 2 failed, 412 passed, 3 skipped in 12.3s =====",
		"tests/test_x.py ..F.s [ 40%]",
		" ✓ src/a.test.ts (3 tests | 1 failed) 5ms\n Tests  1 failed | 2 passed (3)",
		"Tests:       1 failed, 2 skipped, 5 passed, 8 total",
		"DONE 12 tests, 1 skipped, 2 failures in 3.2s",
		"tests: 3 passed, 1 failed",
		"a\na\na\n\n\nb",
	} {
		f.Add(s)
	}
	addTestdata(f)

	f.Fuzz(func(t *testing.T, s string) {
		out := StripANSI(s)
		checkStripped(t, s, out)
		if again := StripANSI(out); again != out {
			t.Fatalf("StripANSI not idempotent: %q -> %q -> %q", s, out, again)
		}
		if strings.Count(out, "\n") != strings.Count(s, "\n") {
			t.Fatalf("StripANSI(%q) = %q: newlines not kept", s, out)
		}
		if len(out) > len(s) {
			t.Fatalf("StripANSI(%q) = %q: longer than its input", s, out)
		}

		lines := strings.Split(out, "\n")
		for _, l := range lines {
			m := Mask(l)
			if !mayHoldSecret(l) && m != l {
				t.Fatalf("Mask(%q) = %q: changed a line without a hint of a secret", l, m)
			}
			if strings.Contains(m, "\n") {
				t.Fatalf("Mask(%q) = %q: added a newline", l, m)
			}
			if again := Mask(m); again != m {
				t.Fatalf("Mask not idempotent: %q -> %q -> %q", l, m, again)
			}
		}
		_ = Mask(s) // raw, uncleaned input: must not panic

		blocked := MaskBlock(lines)
		if len(blocked) != len(lines) {
			t.Fatalf("MaskBlock(%q) returned %d lines", lines, len(blocked))
		}
		for i := range blocked {
			if blocked[i] != lines[i] && blocked[i] != masked {
				t.Fatalf("MaskBlock line %d: %q became %q", i, lines[i], blocked[i])
			}
		}
		checkFold(t, lines, Fold(lines))

		checkCounts(t, s, ParseCounts(strings.Split(s, "\n")))
		checkCounts(t, s, ParseCounts(lines))
	})
}

// FuzzTail feeds raw output chunks (NUL separates the elements of raw) and
// a line count to Tail.
//
// Properties: no panic; at most max(n, 0) lines; no line holds a newline,
// ESC or other control byte but tab, or invalid UTF-8; and the result is
// exactly the last n lines of the whole output cleaned, block-masked, masked
// and folded, with truncated telling whether lines before them were dropped
// (Tail's documented contract, which it computes lazily from the end).
func FuzzTail(f *testing.F) {
	f.Add("\x1b[32mstart\x1b[0m\x00a\x00a\x00token=1\x00token=2\x00b\x00\x00", 3)
	f.Add("-----BEGIN PRIVATE KEY-----\x00x\x00y\x00-----END PRIVATE KEY-----\x00c\r\x00c", 2)
	f.Add("10%\r100%\n100%\nd\n\x00d", 1)
	f.Add("a\nb\n\nc\n\x00\n\x00 \t", 0)
	f.Add("same\x00same\x00same", -1)
	f.Add("line with trailing space  \x00line with trailing space", 5)
	f.Add("--- PASS: TestA (0.00s)\x00--- PASS: TestA (0.00s)\x00ok  \tpkg\t0.1s", 10)

	f.Fuzz(func(t *testing.T, s string, n int) {
		raw := strings.Split(s, "\x00")
		tail, truncated := Tail(raw, n)

		// The reference: clean everything, then fold, then take the end.
		var cleaned []string
		for _, r := range raw {
			r = StripANSI(r)
			parts := []string{r}
			if strings.Contains(r, "\n") {
				parts = strings.Split(strings.TrimSuffix(r, "\n"), "\n")
			}
			for _, p := range parts {
				cleaned = append(cleaned, strings.TrimRight(p, " \t"))
			}
		}
		cleaned = MaskBlock(cleaned)
		for i := range cleaned {
			cleaned[i] = Mask(cleaned[i])
		}
		all := Fold(cleaned)
		keep := max(n, 0)
		want := all[max(len(all)-keep, 0):]
		if len(tail) > keep {
			t.Fatalf("Tail(%q, %d) returned %d lines", raw, n, len(tail))
		}
		if len(tail) != len(want) {
			t.Fatalf("Tail(%q, %d) = %q, want %q", raw, n, tail, want)
		}
		for i := range want {
			if tail[i] != want[i] {
				t.Fatalf("Tail(%q, %d) = %q, want %q", raw, n, tail, want)
			}
		}
		if wantTr := len(all) > keep; truncated != wantTr {
			t.Fatalf("Tail(%q, %d) truncated = %v, want %v", raw, n, truncated, wantTr)
		}
		for _, l := range tail {
			checkStripped(t, s, l)
			if strings.Contains(l, "\n") {
				t.Fatalf("Tail(%q, %d) line %q holds a newline", raw, n, l)
			}
		}
		checkCounts(t, s, ParseCounts(tail))
	})
}

// FuzzMaskSecret puts a known secret after a credential key (kind picks the
// form) between arbitrary text, and checks that Mask leaves no more copies
// of it than the surrounding text itself holds.
//
// The text before the key has its quotes and line breaks removed and is
// separated from the key by ", ": Mask skips a key that lies inside the value
// of an earlier key, so an open quote before the key, or an earlier key
// written right before it ("token: client_secret: X" masks only
// "client_secret:"), leaves the secret as it is. That is a known gap of Mask,
// not what this target checks.
func FuzzMaskSecret(f *testing.F) {
	f.Add("mysql --user=root", "hunter2hunter2", " db", uint8(0))
	f.Add("export", "ghp_abc123", "", uint8(1))
	f.Add("{\"user\":\"bob\",", "x y z", "}", uint8(2))
	f.Add("curl -H", "eyJhbGciOi.eyJzdWIi", " https://x", uint8(3))
	f.Add("git clone", "glpat-abc", "gitlab.com/x.git", uint8(4))
	f.Add("key id", "IOSFODNN7EXAMPLE", "used", uint8(5))
	f.Add("token::x PWD=/a", "s3cret", "&expires=3600", uint8(6))
	f.Add("Authorization: [", "abc", "]", uint8(7))

	f.Fuzz(func(t *testing.T, prefix, secret, suffix string, kind uint8) {
		prefix = strings.Map(func(r rune) rune {
			if strings.ContainsRune("\"'`\n\r", r) {
				return -1
			}
			return r
		}, prefix)
		suffix = strings.Map(func(r rune) rune {
			if r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, suffix)
		alnum := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, secret)
		sec := "Zq9" + alnum + "9qZ"
		var mid string
		switch kind % 8 {
		case 0:
			mid = "password=" + sec
		case 1:
			mid = "GITHUB_TOKEN=" + sec
		case 2:
			mid = `"api_key": "` + sec + `"`
		case 3:
			mid = "Authorization: Bearer " + sec
		case 4:
			mid = "https://user:" + sec + "@host"
		case 5:
			up := strings.ToUpper(alnum + "0000000000000000")[:16]
			sec = "AKIA" + up
			mid = sec + " "
		case 6:
			mid = "client_secret: " + sec
		case 7:
			mid = "using bearer " + sec
		}
		in := prefix + ", " + mid + suffix
		out := Mask(in)
		if got, allowed := strings.Count(out, sec), strings.Count(prefix, sec)+strings.Count(suffix, sec); got > allowed {
			t.Fatalf("Mask(%q) = %q: the secret %q is still there", in, out, sec)
		}
	})
}

// addTestdata adds the recorded runner outputs of testdata/ as seeds.
func addTestdata(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
}

// checkStripped checks what StripANSI promises of its output.
func checkStripped(t *testing.T, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("output of %q is not UTF-8: %q", in, out)
	}
	for _, r := range out {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r >= 0x80 && r < 0xa0 {
			t.Fatalf("output of %q holds control %U: %q", in, r, out)
		}
	}
}

// checkFold checks Fold's output against runs of its input.
func checkFold(t *testing.T, in, out []string) {
	t.Helper()
	k := 0
	for i := 0; i < len(in); {
		j := i + 1
		for j < len(in) && in[j] == in[i] {
			j++
		}
		want := in[i]
		if j-i > 1 {
			want += foldSuffix(j - i)
		}
		if k >= len(out) || out[k] != want {
			t.Fatalf("Fold(%q) = %q: run %d should be %q", in, out, k, want)
		}
		k++
		i = j
	}
	if k != len(out) {
		t.Fatalf("Fold(%q) = %q: %d extra lines", in, out, len(out)-k)
	}
}

// checkCounts checks a ParseCounts result.
func checkCounts(t *testing.T, in string, c *Counts) {
	t.Helper()
	if c == nil {
		return
	}
	switch c.Runner {
	case RunnerGo, RunnerPytest, RunnerVitest, RunnerJest, RunnerCargo, RunnerPlain:
	default:
		t.Fatalf("ParseCounts(%q): unknown runner %q", in, c.Runner)
	}
	if longestDigitRun(in) <= 6 && (c.Passed < 0 || c.Failed < 0 || c.Skipped < 0) {
		t.Fatalf("ParseCounts(%q) = %+v: negative count", in, c)
	}
}

func longestDigitRun(s string) int {
	best, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			cur++
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}
