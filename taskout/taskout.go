// Package taskout turns the raw output of a background shell task into what
// read_task_output shows (SPEC R7.6): plain lines without terminal escapes,
// credentials masked with ***, repeated lines folded as "LINE [×N]", the last
// n of them, and the counts of a test run when the output is one.
//
// Every function is pure and safe for concurrent use.
package taskout

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Counts of a test run recognised in output.
type Counts struct {
	Runner  string `json:"runner"` // "go test" | "pytest" | "vitest" | "jest" | "cargo test" | "plain"
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	Final   bool   `json:"final"` // true when the runner's closing summary line was seen (not just running counts)
}

// Runner names used in Counts.Runner.
const (
	RunnerGo     = "go test"
	RunnerPytest = "pytest"
	RunnerVitest = "vitest"
	RunnerJest   = "jest"
	RunnerCargo  = "cargo test"
	RunnerPlain  = "plain"
)

// masked is what replaces a secret.
const masked = "***"

// ---------------------------------------------------------------------------
// StripANSI

// StripANSI removes terminal escape sequences (CSI such as colours and cursor
// moves, OSC such as titles and hyperlinks, DCS/APC/PM/SOS strings, the short
// two-byte ESC sequences and their 8-bit C1 forms), applies backspaces, drops
// the other control characters except tab, and resolves carriage-return
// progress: of each line only the text after its last \r is kept (a \r that
// ends the line, as in \r\n, is ignored). Newlines in s are kept and each line
// is handled on its own.
func StripANSI(s string) string {
	if !needsStrip(s) {
		return s
	}
	return lastAfterCR(stripControls(s))
}

// stripControls removes escape sequences and control characters other than
// newline, carriage return and tab, and applies backspaces.
func stripControls(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		if next, ok := skipSequence(s, i); ok {
			i = next
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\b':
			b = backspace(b)
		case r == '\n' || r == '\r' || r == '\t':
			b = append(b, byte(r))
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			// Other control characters (BEL, NUL, stray C1) are dropped.
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

// backspace takes back the last rune of b's current line.
func backspace(b []byte) []byte {
	n := len(b)
	if n == 0 || b[n-1] == '\n' || b[n-1] == '\r' {
		return b
	}
	_, last := utf8.DecodeLastRune(b)
	return b[:n-last]
}

// skipSequence skips the escape sequence (EscapeEnd), or the raw byte that
// is not UTF-8, at s[i]: ok with the index after it; not ok at any other
// rune. A raw byte that starts no sequence is dropped.
func skipSequence(s string, i int) (next int, ok bool) {
	if j := EscapeEnd(s, i); j > i {
		return j, true
	}
	if r, size := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && size == 1 {
		return i + 1, true
	}
	return i, false
}

// lastAfterCR resolves carriage-return progress: of each line only the text
// after its last \r is kept (a \r that ends the line is ignored).
func lastAfterCR(out string) string {
	if !strings.Contains(out, "\r") {
		return out
	}
	lines := strings.Split(out, "\n")
	for k, l := range lines {
		l = strings.TrimRight(l, "\r")
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			l = l[j+1:]
		}
		lines[k] = l
	}
	return strings.Join(lines, "\n")
}

func needsStrip(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' && c != '\n' || c == 0x7f {
			return true
		}
		if c >= 0x80 {
			// Only a C1 control (U+0080–U+009F, encoded C2 80–C2 9F) or a raw
			// non-UTF-8 byte needs work; other non-ASCII text is kept.
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || r >= 0x80 && r < 0xa0 {
				return true
			}
			i += size - 1
		}
	}
	return false
}

// skipEscape returns the index after the escape sequence whose ESC was just
// before i.
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[':
		return skipCSI(s, i+1)
	case ']', 'P', 'X', '^', '_':
		return skipString(s, i+1)
	}
	// nF sequences: intermediate bytes then one final byte (ESC ( B, ESC # 8);
	// Fp/Fe/Fs: a single byte (ESC 7, ESC =, ESC M, ESC c).
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
		i++
	}
	if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
		i++
	}
	return i
}

// skipCSI skips parameter and intermediate bytes and the final byte.
func skipCSI(s string, i int) int {
	for i < len(s) {
		c := s[i]
		i++
		if c >= 0x40 && c <= 0x7e {
			return i
		}
		if c < 0x20 || c > 0x7e {
			// Malformed: stop before a byte that cannot be part of CSI.
			return i - 1
		}
	}
	return i
}

// skipString skips an OSC/DCS-like string up to BEL or ST (ESC \ or 0x9c).
// An unterminated string runs to the end of its line.
func skipString(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == 0x07:
			return i + 1
		case s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\':
			return i + 2
		case s[i] == 0x9c:
			return i + 1
		case s[i] == 0xc2 && i+1 < len(s) && s[i+1] == 0x9c:
			return i + 2
		case s[i] == '\n':
			return i
		}
		i++
	}
	return i
}

// EscapeEnd returns the index just after the terminal escape sequence that
// starts at s[i] (ESC, or a C1 introducer — CSI, DCS, SOS, OSC, PM, APC — as
// a UTF-8 rune or a raw 8-bit byte), parsed as StripANSI parses it; i when no
// escape sequence starts there. The relay's line values use it (R18.16).
func EscapeEnd(s string, i int) int {
	if i >= len(s) {
		return i
	}
	if s[i] == 0x1b {
		return skipEscape(s, i+1)
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size == 1 {
		r = rune(s[i]) // a raw 8-bit introducer
	}
	switch r {
	case 0x9b:
		return skipCSI(s, i+size)
	case 0x90, 0x98, 0x9d, 0x9e, 0x9f:
		return skipString(s, i+size)
	}
	return i
}

// ---------------------------------------------------------------------------
// Mask

var (
	// A PEM private key written on one line (JSON strings, env values).
	rePEMInline = regexp.MustCompile(`(-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)(.*?)(-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)`)
	rePEMBegin  = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
	rePEMEnd    = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)

	// An Authorization header name and its separator.
	reAuthHeader = regexp.MustCompile(`(?i)\b(?:proxy-)?authorization["']?\s*(?:=>|[:=])\s*`)

	// A key whose value is a secret, and its separator. The key may carry a
	// prefix (DB_PASSWORD, access_token, X-Auth-Token, clientSecret) and, for
	// secret/token, a key suffix (aws_secret_access_key, secret_key).
	reSecretKey = regexp.MustCompile(`(?i)[\w.-]*(?:password|passwd|passphrase|pwd|token|secret|api[_-]?key|private[_-]?key)(?:[_-]?(?:access[_-]?)?key)?["']?\s*(?:=>|[:=])\s*`)

	// An auth scheme word that comes before the credential in a value.
	reScheme = regexp.MustCompile(`(?i)^(?:bearer|basic|token|digest)\s+`)

	// A bearer token anywhere.
	reBearer = regexp.MustCompile(`(?i)\b(bearer\s+)([A-Za-z0-9\-._~+/]+=*)`)

	// AWS access key ids.
	reAWSKeyID = regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`)

	// A URL with user:password@.
	reURLCreds = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:"'<>]*):([^\s/?#"'<>]+)@`)
)

// Mask masks credentials in one line, replacing each secret with ***:
//   - a private key written on one line: what follows -----BEGIN … PRIVATE
//     KEY----- up to the END marker (or the end of the line);
//   - an Authorization (or Proxy-Authorization) header value, whole
//     (scheme and credentials), up to its closing quote or the end of the line;
//   - user:password@ in a URL becomes user:***@;
//   - the value after password, passwd, passphrase, pwd, token, secret,
//     api_key/apikey/api-key, private_key (also with a prefix such as DB_ or
//     access_, or a suffix such as _access_key) and =, : or =>, quoted or not;
//   - a bearer token: Bearer *** (a short all-letter word after "bearer" is
//     taken for prose and kept);
//   - AWS access key ids (AKIA…/ASIA… plus 16 capitals or digits).
//
// A key without a separator ("password reset"), a Go or Rust path (token::x,
// token := x) and PWD=/a/path (the shell's working directory) are kept.
// Mask is idempotent.
func Mask(s string) string {
	if !mayHoldSecret(s) {
		return s
	}
	s = rePEMInline.ReplaceAllStringFunc(s, func(m string) string {
		sub := rePEMInline.FindStringSubmatch(m)
		if v := strings.TrimSpace(sub[2]); v == "" || v == masked {
			return m
		}
		return sub[1] + masked + sub[3]
	})
	s = maskValues(s, reAuthHeader, true)
	s = reURLCreds.ReplaceAllString(s, "${1}:"+masked+"@")
	s = maskValues(s, reSecretKey, false)
	s = reBearer.ReplaceAllStringFunc(s, func(m string) string {
		sub := reBearer.FindStringSubmatch(m)
		if looksLikeWord(sub[2]) {
			return m
		}
		return sub[1] + masked
	})
	s = reAWSKeyID.ReplaceAllString(s, masked)
	return s
}

// mayHoldSecret is a cheap filter so that most lines skip the regexps.
func mayHoldSecret(s string) bool {
	l := strings.ToLower(s)
	for _, w := range []string{"auth", "bearer", "pass", "pwd", "token", "secret", "key", "akia", "asia", "://"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// looksLikeWord reports whether a string after "bearer" is more likely prose
// than a token: letters only and shorter than 16.
func looksLikeWord(t string) bool {
	if len(t) >= 16 {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// cleanLines is raw stripped of escapes, its elements that hold newlines
// split into lines (one trailing newline ends the last), trailing spaces
// trimmed.
func cleanLines(raw []string) []string {
	lines := make([]string, 0, len(raw))
	for _, r := range raw {
		r = StripANSI(r)
		if !strings.Contains(r, "\n") {
			lines = append(lines, strings.TrimRight(r, " \t"))
			continue
		}
		for _, l := range strings.Split(strings.TrimSuffix(r, "\n"), "\n") {
			lines = append(lines, strings.TrimRight(l, " \t"))
		}
	}
	return lines
}

// maskValues replaces the value after each match of re (a key and its
// separator) with ***. header selects the Authorization rules: the whole
// rest of the value, not just one token.
func maskValues(s string, re *regexp.Regexp, header bool) string {
	locs := re.FindAllStringIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, loc := range locs {
		if loc[1] <= last {
			continue // inside a value already masked
		}
		// A key inside the value masked before ("TOKEN: PASSWORD: x"): its
		// own value is masked too.
		vs, ve, ok := secretSpan(s, loc[0], loc[1], header)
		if !ok {
			continue
		}
		b.WriteString(s[last:vs])
		b.WriteString(masked)
		last = ve
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// secretSpan is the span of the value to mask after the key s[keyStart:vStart]
// (its separator included); not ok when there is none: the separator is an
// operator, the value is empty or masked already, or it is a working
// directory.
func secretSpan(s string, keyStart, vStart int, header bool) (vs, ve int, ok bool) {
	key := s[keyStart:vStart]
	if sepIsOperator(s, keyStart, key) {
		return 0, 0, false
	}
	var opener byte
	if keyStart > 0 {
		opener = s[keyStart-1]
	}
	vs, ve = valueSpan(s, vStart, opener, header)
	if ve <= vs {
		return 0, 0, false
	}
	val := s[vs:ve]
	if strings.HasPrefix(val, masked) || !header && isWorkingDir(key, val) {
		return 0, 0, false
	}
	return vs, ve, true
}

// sepIsOperator reports a separator that is part of "::", ":=", "==", "=~"
// (code and paths such as token::x or token := x) rather than a key/value
// separator. key is the regexp match starting at keyStart.
func sepIsOperator(s string, keyStart int, key string) bool {
	k := strings.TrimRight(key, " \t")
	if strings.HasSuffix(k, "=>") {
		return false
	}
	end := keyStart + len(k)
	return end < len(s) && strings.IndexByte(":=~", s[end]) >= 0
}

func isWorkingDir(key, val string) bool {
	k := strings.ToLower(strings.TrimRight(key, " \t:=\"'"))
	k = strings.TrimLeft(k, "$-")
	return (k == "pwd" || k == "oldpwd") && (strings.HasPrefix(val, "/") || strings.HasPrefix(val, "~"))
}

// valueSpan finds the value that starts at i. A quoted value runs to its
// closing quote (the quotes are kept); for a header, a value in [ ] (Go's
// http.Header) runs to ], one inside a quoted string (-H "Authorization: x")
// to that string's closing quote, and any other to the end of the line.
// Other unquoted values are one token, with an auth scheme word before it
// included (token: Bearer x).
func valueSpan(s string, i int, opener byte, header bool) (int, int) {
	if i >= len(s) {
		return i, i
	}
	lineEnd := strings.IndexByte(s[i:], '\n')
	if lineEnd < 0 {
		lineEnd = len(s)
	} else {
		lineEnd += i
	}
	switch c := s[i]; {
	case c == '"' || c == '\'' || c == '`':
		return i + 1, closingQuote(s, i+1, lineEnd, c)
	case header:
		return headerSpan(s, i, lineEnd, opener)
	}
	return i, tokenEnd(s, i, lineEnd)
}

// headerSpan is an unquoted header value's span: in [ ] to the ], inside a
// string opened by opener to its closing quote, else to the line's end.
func headerSpan(s string, i, lineEnd int, opener byte) (int, int) {
	switch {
	case s[i] == '[':
		if j := strings.IndexByte(s[i+1:lineEnd], ']'); j >= 0 {
			return i + 1, i + 1 + j
		}
		return i + 1, lineEnd
	case opener == '"' || opener == '\'' || opener == '`':
		return i, closingQuote(s, i, lineEnd, opener)
	}
	return i, i + len(strings.TrimRight(s[i:lineEnd], " \t"))
}

// tokenEnd is the end of the token at i, an auth scheme word before it
// included; i when there is none (a scheme word alone is not a value).
func tokenEnd(s string, i, lineEnd int) int {
	j := i
	if m := reScheme.FindStringIndex(s[i:lineEnd]); m != nil {
		j = i + m[1]
	}
	k := j
	for k < lineEnd && !strings.ContainsRune(" \t\"'`,;&)}]<>", rune(s[k])) {
		k++
	}
	if k == j {
		return i
	}
	return k
}

// closingQuote returns the index of quote q at or after i (skipping
// backslash escapes), or end when there is none.
func closingQuote(s string, i, end int, q byte) int {
	for j := i; j < end; j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j
		}
	}
	return end
}

// MaskBlock masks multi-line secrets across lines: the lines between a line
// ending with "-----BEGIN … PRIVATE KEY-----" (PEM: RSA, EC, OPENSSH,
// ENCRYPTED, PGP … BLOCK; the marker may be indented or follow a prefix such
// as "app-1  | ") and the next line holding "-----END … PRIVATE KEY-----"
// each become "***"; the BEGIN and END lines are kept as they are. A block
// that never ends masks every line after BEGIN. A BEGIN marker with more text
// after it on its line is not a block: that is a key written on one line (or
// a quote of the marker), which Mask handles. The input is not modified.
func MaskBlock(lines []string) []string {
	out := make([]string, len(lines))
	in := false
	for i, l := range lines {
		out[i] = l
		if !in {
			loc := rePEMBegin.FindStringIndex(l)
			in = loc != nil && strings.TrimSpace(l[loc[1]:]) == ""
			continue
		}
		if !rePEMEnd.MatchString(l) {
			out[i] = masked
			continue
		}
		in = false
	}
	return out
}

// ---------------------------------------------------------------------------
// Fold and Tail

// foldSuffix is the marker Fold appends.
func foldSuffix(n int) string { return " [×" + strconv.Itoa(n) + "]" }

var reFolded = regexp.MustCompile(`^(.*) \[×(\d+)\]$`)

// Fold replaces each run of consecutive identical lines with one line
// "LINE [×N]" (N >= 2). A run of empty lines becomes " [×N]". The input is not
// modified.
func Fold(lines []string) []string {
	out := make([]string, 0, len(lines))
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && lines[j] == lines[i] {
			j++
		}
		if n := j - i; n > 1 {
			out = append(out, lines[i]+foldSuffix(n))
		} else {
			out = append(out, lines[i])
		}
		i = j
	}
	return out
}

// Tail cleans raw output lines (StripANSI, then Mask), folds them, and
// returns the last n folded lines; truncated is true when folded lines before
// those were dropped.
//
// An element of raw that holds newlines is split into lines (one trailing
// newline ends its last line), trailing spaces are trimmed, and MaskBlock runs
// over the cleaned lines before Mask. n <= 0 returns no lines (truncated then
// tells whether there was any output). Only the lines that can reach the
// result are masked, so a long output costs little more than its cleaning.
func Tail(raw []string, n int) (tail []string, truncated bool) {
	lines := MaskBlock(cleanLines(raw))

	// Fold from the end, masking lazily, until n groups are complete and one
	// more line shows whether anything came before them.
	type group struct {
		line  string
		count int
	}
	var groups []group // newest first
	for i := len(lines) - 1; i >= 0; i-- {
		l := Mask(lines[i])
		if k := len(groups); k > 0 && groups[k-1].line == l {
			groups[k-1].count++
			continue
		}
		if len(groups) >= n {
			truncated = true
			break
		}
		groups = append(groups, group{l, 1})
	}
	tail = make([]string, 0, len(groups))
	for k := len(groups) - 1; k >= 0; k-- {
		g := groups[k]
		if g.count > 1 {
			tail = append(tail, g.line+foldSuffix(g.count))
		} else {
			tail = append(tail, g.line)
		}
	}
	return tail, truncated
}

// ---------------------------------------------------------------------------
// ParseCounts

var (
	// go test
	reGoRun    = regexp.MustCompile(`^=== (?:RUN|PAUSE|CONT|NAME)\s+\S`)
	reGoResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(\d+(?:\.\d+)?s\)$`)
	reGoOK     = regexp.MustCompile(`^ok\s+\S+\s+(?:\(cached\)|\d+(?:\.\d+)?s|\[no tests to run\])(?:\s.*)?$`)
	reGoFAIL   = regexp.MustCompile(`^FAIL\s+\S+\s+(?:\(cached\)|\d+(?:\.\d+)?s|\[build failed\]|\[setup failed\])(?:\s.*)?$`)
	reGoNoTest = regexp.MustCompile(`^\?\s+\S+\s+\[no test files\]$`)
	reGoBare   = regexp.MustCompile(`^(?:PASS|FAIL)$`)
	reGoPkgEnd = regexp.MustCompile(`^(ok|FAIL)\s+[^\s\d]\S*$`) // without a duration: only inside a go run
	// gotestsum: DONE 12 tests, 1 skipped, 2 failures in 3.2s
	reGotestsum = regexp.MustCompile(`^DONE (?:\d+ runs?, )?(\d+) tests?((?:, \d+ [a-z]+)*) in \S+$`)

	// pytest
	rePytestStart    = regexp.MustCompile(`^=+ test session starts =+$`)
	rePytestSummary  = regexp.MustCompile(`^(?:=+ )?(no tests ran|\d+ [a-z]+(?:, \d+ [a-z]+)*) in \d+(?:\.\d+)? ?(?:s|seconds)(?: \([^)]*\))?(?: =+)?$`)
	rePytestVerbose  = regexp.MustCompile(`^\S+\.py::.*?\s(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?:\s+.*)?$`)
	rePytestXdist    = regexp.MustCompile(`^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) \S`)
	rePytestProgress = regexp.MustCompile(`^(?:\S+\.py ([.FEsxX]+)(?:\s+\[\s*\d+%\])?|([.FEsxX]+)\s+\[\s*\d+%\])$`)

	// vitest
	reVitestStart   = regexp.MustCompile(`^\s*(?:RUN\s+v\d|RERUN\s)`)
	reVitestFile    = regexp.MustCompile(`^\s*[✓✔√❯×✗↓]\s+.*?\s\((\d+) tests?((?:\s*\|\s*\d+ [a-z]+)*)\)(?:\s.*)?$`)
	reVitestTest    = regexp.MustCompile(`^\s?([✓✔√×✗✖↓□])\s+\S+ > \S`)
	reVitestFiles   = regexp.MustCompile(`^\s*Test Files\s+\d`)
	reVitestSummary = regexp.MustCompile(`^\s*Tests\s+(\d+ [a-z]+(?:\s*\|\s*\d+ [a-z]+)*)\s+\((\d+)\)(?:\s.*)?$`)

	// jest
	reJestFile    = regexp.MustCompile(`^(?:PASS|FAIL)\s+.*\.[cm]?[jt]sx?(?:\s+\([^)]*\))?$`)
	reJestSuites  = regexp.MustCompile(`^Test Suites:\s+\d`)
	reJestSummary = regexp.MustCompile(`^Tests:\s+((?:\d+ [a-z]+, )*)(\d+) total$`)
	reJestTest    = regexp.MustCompile(`^\s+(✓|✔|√|✕|×|✖|○|✎)\s+\S`)

	// cargo test
	reCargoRunning = regexp.MustCompile(`^running \d+ tests?$`)
	reCargoTest    = regexp.MustCompile(`^test .+ \.\.\. (ok|FAILED|ignored)(?:,.*)?$`)
	reCargoResult  = regexp.MustCompile(`^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored;`)
	reCargoBinary  = regexp.MustCompile(`^\s+(?:Running|Doc-tests)\s`)
	reCargoDone    = regexp.MustCompile(`^\s+Finished\s`)

	// plain
	rePlain = regexp.MustCompile(`(?i)^(?:[a-z][\w-]*:\s*)?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$`)

	reNumWord = regexp.MustCompile(`(\d+) ([a-z]+)`)
)

// ParseCounts scans cleaned lines (oldest first) and returns the counts of
// the last recognised test run, or nil when there is none.
//
// Lines may be folded ("LINE [×N]" counts N times) and may still hold ANSI
// escapes (they are stripped). Trailing spaces are ignored; leading ones
// matter where a runner's layout fixes them.
//
// Runners and what is counted:
//
//   - go test: "--- PASS/FAIL/SKIP: Name (0.00s)" lines, counting leaf tests:
//     a test with subtests is not counted itself (its subtests are), except
//     that a parent that FAILs while none of its subtests failed counts as one
//     failure. Within a package the leaf/parent decision uses the lines seen
//     so far. "ok pkg 0.1s", "FAIL pkg 0.1s", "FAIL pkg [build failed]",
//     "? pkg [no test files]" (and, inside a go run, "ok pkg"/"FAIL pkg"
//     without a duration) close a package and, like a bare PASS/FAIL line
//     inside a go run, make the counts final; a "FAIL pkg" with no failed
//     test (build failure, panic in TestMain) counts as one failure. Test lines after a closing line make the counts running
//     again (go test ./... prints one closing line per package), so final
//     means "the last thing seen was a closing line". gotestsum's
//     "DONE N tests[, N skipped][, N failures][, N errors] in Xs" replaces
//     the counts (passed = tests - skipped - failures; errors count as
//     failed) and is final.
//   - pytest: progress lines ("path.py ..F.s [ 40%]" and continuation lines),
//     verbose lines ("path.py::test PASSED"), xdist lines; the summary
//     "=== 2 failed, 412 passed, 3 skipped in 12.3s ===" (borders optional,
//     as with -q) replaces them and is final. errors count as failed,
//     xfailed as skipped, xpassed as passed. "test session starts" begins a
//     new run.
//   - vitest: per-file lines "✓ file (N tests | M failed | K skipped)" while
//     running, or, when there are none (the verbose reporter), the per-test
//     lines "✓ file > suite > test" (× failed, ↓ skipped, □ todo);
//     "Tests  2 failed | 412 passed (414)" is final (todo counts as skipped).
//     "RUN v…"/"RERUN" begin a new run.
//   - jest: "PASS/FAIL file.test.js" lines mark a run; with --verbose the
//     ✓/✕/○/✎ test lines give running counts; "Tests: … N total" is final
//     (todo counts as skipped).
//   - cargo test: "test name ... ok|FAILED|ignored" lines while a test binary
//     runs; "test result: …. N passed; N failed; N ignored; …" lines are
//     summed over the binaries of one run (ignored = skipped) and make the
//     counts final until the next binary starts ("Running …", "Doc-tests",
//     "running N tests"). A cargo "Finished" line after a result closes the
//     run.
//   - plain: a line that is exactly "N passed, N failed[, N skipped]"
//     (words in any case), optionally preceded by one word and a colon
//     ("tests: 3 passed, 1 failed"), not indented; it is a run of its own and
//     final.
//
// go test -json, gotestsum's per-test formats and cargo nextest are not
// recognised (gotestsum's DONE line is).
//
// A line of another runner ends the current run. A run whose closing summary
// was seen is closed: the next line of the same runner starts a new run
// (except go test packages and cargo binaries, which add up until another
// runner, a gotestsum DONE, or cargo's "Finished" closes them).
func ParseCounts(lines []string) *Counts {
	var p parser
	for _, raw := range lines {
		p.line(raw)
	}
	if p.cur == nil {
		return nil
	}
	return p.cur.counts()
}

// tally is a passed/failed/skipped triple.
type tally struct{ passed, failed, skipped int }

func (t *tally) add(u tally) {
	t.passed += u.passed
	t.failed += u.failed
	t.skipped += u.skipped
}

// outcome is what a runner's mark or word says of its tests.
type outcome uint8

const (
	notCounted outcome = iota // a word the runner writes that counts no test (warnings, total…)
	passed
	failed
	skipped
)

// count adds n tests of outcome o.
func (t *tally) count(o outcome, n int) {
	switch o {
	case passed:
		t.passed += n
	case failed:
		t.failed += n
	case skipped:
		t.skipped += n
	}
}

// The runners' marks and words by outcome; a word missing from a summary's
// table means the line is not that runner's.
var (
	cargoMarks   = map[string]outcome{"ok": passed, "FAILED": failed, "ignored": skipped}
	pytestMarks  = map[string]outcome{"PASSED": passed, "XPASS": passed, "FAILED": failed, "ERROR": failed, "SKIPPED": skipped, "XFAIL": skipped}
	pytestDots   = map[rune]outcome{'.': passed, 'X': passed, 'F': failed, 'E': failed, 's': skipped, 'x': skipped}
	jestMarks    = map[string]outcome{"✓": passed, "✔": passed, "√": passed, "✕": failed, "×": failed, "✖": failed, "○": skipped, "✎": skipped}
	vitestMarks  = map[string]outcome{"✓": passed, "✔": passed, "√": passed, "×": failed, "✗": failed, "✖": failed, "↓": skipped, "□": skipped}
	gotestsumSum = map[string]outcome{"skipped": skipped, "failure": failed, "failures": failed, "error": failed, "errors": failed}
	jsSum        = map[string]outcome{"passed": passed, "failed": failed, "skipped": skipped, "todo": skipped, "pending": skipped, "total": notCounted}
	pytestSum    = map[string]outcome{
		"passed": passed, "xpassed": passed,
		"failed": failed, "error": failed, "errors": failed,
		"skipped": skipped, "xfailed": skipped,
		"warning": notCounted, "warnings": notCounted, "deselected": notCounted, "rerun": notCounted, "reruns": notCounted,
	}
)

type goEntry struct {
	name   string
	status byte // 'P', 'F', 'S'
	mult   int
}

// run is one test run being recognised.
type run struct {
	runner string

	// done holds settled counts: closed go packages, finished cargo
	// binaries, a summary line's counts, or the running counts of pytest
	// and jest.
	done tally

	seg []goEntry // go: tests of the package being run

	section      tally // cargo: the test binary being run
	cargoResults int   // cargo: "test result" lines seen

	vitestFiles     tally // vitest: per-file lines
	vitestTests     tally // vitest: per-test lines (verbose reporter)
	vitestFilesSeen bool  // per-file lines win over per-test lines

	final  bool
	closed bool // the next line of this runner starts a new run
}

func (r *run) counts() *Counts {
	t := r.done
	switch r.runner {
	case RunnerGo:
		t.add(goLeafCounts(r.seg))
	case RunnerCargo:
		t.add(r.section)
	case RunnerVitest:
		if !r.final {
			if r.vitestFilesSeen {
				t.add(r.vitestFiles)
			} else {
				t.add(r.vitestTests)
			}
		}
	}
	return &Counts{Runner: r.runner, Passed: t.passed, Failed: t.failed, Skipped: t.skipped, Final: r.final}
}

// goLeafCounts counts the leaf tests of one package, and parents that failed
// on their own.
func goLeafCounts(seg []goEntry) tally {
	var t tally
	if len(seg) == 0 {
		return t
	}
	parents := map[string]bool{}
	failedBelow := map[string]bool{}
	for _, e := range seg {
		for j := strings.LastIndexByte(e.name, '/'); j > 0; j = strings.LastIndexByte(e.name[:j], '/') {
			anc := e.name[:j]
			parents[anc] = true
			if e.status == 'F' {
				failedBelow[anc] = true
			}
		}
	}
	for _, e := range seg {
		if parents[e.name] {
			if e.status == 'F' && !failedBelow[e.name] {
				t.failed += e.mult
			}
			continue
		}
		t.count(goStatus[e.status], e.mult)
	}
	return t
}

// goStatus is the outcome of a Go test's "--- PASS/FAIL/SKIP" line.
var goStatus = map[byte]outcome{'P': passed, 'F': failed, 'S': skipped}

type parser struct {
	cur *run
}

// ensure makes the current run one of runner, starting a new one when the
// current run is of another runner or closed.
func (p *parser) ensure(runner string) *run {
	if !p.is(runner) {
		p.cur = &run{runner: runner}
	}
	return p.cur
}

// fresh starts a new run.
func (p *parser) fresh(runner string) *run {
	p.cur = &run{runner: runner}
	return p.cur
}

// is reports whether the current run is an open run of runner.
func (p *parser) is(runner string) bool {
	return p.cur != nil && p.cur.runner == runner && !p.cur.closed
}

// summary sets the closing counts of runner's current run (or a new one).
func (p *parser) summary(runner string, t tally) {
	r := p.ensure(runner)
	*r = run{runner: runner, done: t, final: true, closed: true}
}

func (p *parser) line(raw string) {
	l, mult := unfold(strings.TrimRight(StripANSI(raw), " \t\r\n"))
	if l == "" {
		return
	}
	_ = p.goLine(l, mult) ||
		p.cargoLine(l, mult) ||
		p.pytestLine(l, mult) ||
		p.jestLine(l, mult) ||
		p.vitestLine(l, mult) ||
		p.plainLine(l)
}

// unfold splits a line folded by Tail ("line [×3]") into the line and how
// many times it came; any other line came once.
func unfold(l string) (string, int) {
	if !strings.HasSuffix(l, "]") || !strings.Contains(l, " [×") {
		return l, 1
	}
	m := reFolded.FindStringSubmatch(l)
	if m == nil {
		return l, 1
	}
	if n, err := atoiCount(m[2]); err == nil && n >= 2 {
		return strings.TrimRight(m[1], " \t"), n
	}
	return l, 1
}

func (p *parser) goLine(l string, mult int) bool {
	if !hasAnyPrefix(strings.TrimLeft(l, " \t"), "=== ", "--- ", "ok", "FAIL", "?", "PASS", "DONE ") {
		return false
	}
	switch {
	case reGoRun.MatchString(l):
		p.ensure(RunnerGo).final = false
	case reGoResult.MatchString(l):
		m := reGoResult.FindStringSubmatch(l)
		r := p.ensure(RunnerGo)
		r.seg = append(r.seg, goEntry{name: m[2], status: m[1][0], mult: mult})
		r.final = false
	case reGoOK.MatchString(l), reGoNoTest.MatchString(l):
		p.goClose(false)
	case reGoFAIL.MatchString(l):
		p.goClose(true)
	case reGoBare.MatchString(l):
		if !p.is(RunnerGo) {
			return false
		}
		p.cur.final = true
	case p.is(RunnerGo) && reGoPkgEnd.MatchString(l):
		p.goClose(strings.HasPrefix(l, "FAIL"))
	case reGotestsum.MatchString(l):
		return p.gotestsumLine(l)
	default:
		return false
	}
	return true
}

// gotestsumLine reads gotestsum's "DONE N tests, …" summary (its passed
// tests are those neither skipped nor failed).
func (p *parser) gotestsumLine(l string) bool {
	m := reGotestsum.FindStringSubmatch(l)
	total, _ := atoiCount(m[1])
	t, ok := sumWordsBy(m[2], gotestsumSum)
	if !ok {
		return false
	}
	t.passed = max(total-t.skipped-t.failed, 0)
	p.summary(RunnerGo, t)
	return true
}

// goClose ends the package being run; failedPkg marks a "FAIL pkg" line.
func (p *parser) goClose(failedPkg bool) {
	r := p.ensure(RunnerGo)
	t := goLeafCounts(r.seg)
	if failedPkg && t.failed == 0 {
		t.failed = 1
	}
	r.done.add(t)
	r.seg = nil
	r.final = true
}

func (p *parser) cargoLine(l string, mult int) bool {
	if !hasAnyPrefix(strings.TrimLeft(l, " \t"), "running ", "test ", "Running ", "Doc-tests ", "Finished ") {
		return false
	}
	switch {
	case reCargoRunning.MatchString(l):
		r := p.ensure(RunnerCargo)
		r.section = tally{}
		r.final = false
	case reCargoTest.MatchString(l):
		m := reCargoTest.FindStringSubmatch(l)
		r := p.ensure(RunnerCargo)
		r.section.count(cargoMarks[m[1]], mult)
		r.final = false
	case reCargoResult.MatchString(l):
		m := reCargoResult.FindStringSubmatch(l)
		r := p.ensure(RunnerCargo)
		ps, _ := atoiCount(m[1])
		f, _ := atoiCount(m[2])
		s, _ := atoiCount(m[3])
		r.done.add(tally{ps, f, s})
		r.section = tally{}
		r.cargoResults++
		r.final = true
	case p.cur != nil && p.cur.runner == RunnerCargo && reCargoBinary.MatchString(l):
		// A closed run is followed by a new invocation's first binary.
		p.ensure(RunnerCargo).final = false
	case p.is(RunnerCargo) && p.cur.cargoResults > 0 && reCargoDone.MatchString(l):
		p.cur.closed = true
	default:
		return false
	}
	return true
}

func (p *parser) pytestLine(l string, mult int) bool {
	if !mayBePytest(l) {
		return false
	}
	switch {
	case rePytestStart.MatchString(l):
		p.fresh(RunnerPytest)
	case rePytestSummary.MatchString(l):
		t, ok := pytestSummary(rePytestSummary.FindStringSubmatch(l)[1])
		if !ok {
			return false // not pytest's words
		}
		p.summary(RunnerPytest, t)
	case rePytestVerbose.MatchString(l), rePytestXdist.MatchString(l):
		m := rePytestVerbose.FindStringSubmatch(l)
		if m == nil {
			m = rePytestXdist.FindStringSubmatch(l)
		}
		p.ensure(RunnerPytest).done.count(pytestMarks[m[1]], mult)
	case rePytestProgress.MatchString(l):
		m := rePytestProgress.FindStringSubmatch(l)
		r := p.ensure(RunnerPytest)
		for _, c := range m[1] + m[2] {
			r.done.count(pytestDots[c], mult)
		}
	default:
		return false
	}
	return true
}

// mayBePytest is a cheap look before pytest's patterns: a line of pytest
// has one of these marks.
func mayBePytest(l string) bool {
	return strings.HasPrefix(l, "=") || strings.HasPrefix(l, "[gw") || strings.HasSuffix(l, "%]") ||
		strings.Contains(l, " in ") || strings.Contains(l, ".py")
}

// pytestSummary adds up pytest's closing "N word, N word" counts ("no
// tests ran": none); ok is false when a word is not pytest's.
func pytestSummary(s string) (t tally, ok bool) {
	if s == "no tests ran" {
		return t, true
	}
	for _, part := range strings.Split(s, ", ") {
		n, word, _ := strings.Cut(part, " ")
		k, _ := atoiCount(n)
		o, known := pytestSum[word]
		if !known {
			return tally{}, false
		}
		t.count(o, k)
	}
	return t, true
}

func (p *parser) jestLine(l string, mult int) bool {
	if !hasAnyPrefix(l, "PASS", "FAIL", "Test") && !p.is(RunnerJest) {
		return false
	}
	switch {
	case reJestFile.MatchString(l), reJestSuites.MatchString(l):
		p.ensure(RunnerJest)
	case p.is(RunnerJest) && reJestTest.MatchString(l):
		p.cur.done.count(jestMarks[reJestTest.FindStringSubmatch(l)[1]], mult)
	case reJestSummary.MatchString(l):
		t, ok := sumWords(reJestSummary.FindStringSubmatch(l)[1])
		if !ok {
			return false
		}
		p.summary(RunnerJest, t)
	default:
		return false
	}
	return true
}

func (p *parser) vitestLine(l string, mult int) bool {
	if !mayBeVitest(l) {
		return false
	}
	switch {
	case reVitestStart.MatchString(l):
		p.fresh(RunnerVitest)
	case reVitestSummary.MatchString(l):
		t, ok := sumWords(reVitestSummary.FindStringSubmatch(l)[1])
		if !ok {
			return false
		}
		p.summary(RunnerVitest, t)
	case reVitestFile.MatchString(l):
		return p.vitestFileLine(l, mult)
	case reVitestTest.MatchString(l):
		p.ensure(RunnerVitest).vitestTests.count(vitestMarks[reVitestTest.FindStringSubmatch(l)[1]], mult)
	case reVitestFiles.MatchString(l):
		p.ensure(RunnerVitest)
	default:
		return false
	}
	return true
}

// mayBeVitest is a cheap look before vitest's patterns.
func mayBeVitest(l string) bool {
	return strings.Contains(l, "RUN") || strings.Contains(l, "Test") || strings.Contains(l, " test") ||
		strings.Contains(l, " > ")
}

// vitestFileLine reads a vitest file's line "file (N tests | N failed …)":
// its passed tests are those neither failed nor skipped.
func (p *parser) vitestFileLine(l string, mult int) bool {
	m := reVitestFile.FindStringSubmatch(l)
	total, _ := atoiCount(m[1])
	t, ok := sumWords(m[2])
	if !ok {
		return false
	}
	r := p.ensure(RunnerVitest)
	r.vitestFilesSeen = true
	t.passed = max(total-t.failed-t.skipped, 0)
	r.vitestFiles.add(tally{t.passed * mult, t.failed * mult, t.skipped * mult})
	return true
}

// sumWords adds up the "N word" parts (passed, failed, skipped, todo, …) of
// a JS runner's summary; ok is false when a word is unknown.
func sumWords(s string) (t tally, ok bool) { return sumWordsBy(s, jsSum) }

// sumWordsBy adds up the "N word" parts of s by the words' outcomes; ok is
// false when a word is not in words.
func sumWordsBy(s string, words map[string]outcome) (t tally, ok bool) {
	for _, nw := range reNumWord.FindAllStringSubmatch(s, -1) {
		n, _ := atoiCount(nw[1])
		o, known := words[nw[2]]
		if !known {
			return tally{}, false
		}
		t.count(o, n)
	}
	return t, true
}

func (p *parser) plainLine(l string) bool {
	if !strings.Contains(l, "assed, ") && !strings.Contains(l, "ASSED, ") {
		return false
	}
	m := rePlain.FindStringSubmatch(l)
	if m == nil {
		return false
	}
	var t tally
	t.passed, _ = atoiCount(m[1])
	t.failed, _ = atoiCount(m[2])
	if m[3] != "" {
		t.skipped, _ = atoiCount(m[3])
	}
	p.fresh(RunnerPlain)
	p.summary(RunnerPlain, t)
	return true
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// maxCount bounds a parsed count, so absurd numbers in output cannot
// overflow the sums (found by FuzzCleanLine).
const maxCount = 1_000_000_000

// atoiCount is strconv.Atoi for counts: an out-of-range or huge number is maxCount.
func atoiCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if errors.Is(err, strconv.ErrRange) {
		return maxCount, nil
	}
	if err != nil {
		return 0, err
	}
	return min(n, maxCount), nil
}
