package store

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain, on one real Redis (REDIS_URL redis://…), watches every command of
// the store's tests with MONITOR and fails the run when a Lua script of a
// test's store touched a key that is not among its KEYS (R21.2: on a cluster
// a script may touch only the keys it declares). The keys of each command a
// script ran are what Redis itself says they are (COMMAND GETKEYS). A script
// runs atomically, so the commands MONITOR shows as "lua" right after an
// EVAL/EVALSHA are that script's.
func TestMain(m *testing.M) {
	url := os.Getenv("REDIS_URL")
	if !strings.HasPrefix(url, "redis://") && !strings.HasPrefix(url, "rediss://") {
		os.Exit(m.Run())
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// MONITOR over a plain connection (go-redis's Monitor polls).
	conn, err := net.Dial("tcp", opt.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "monitor:", err)
		os.Exit(2)
	}
	if opt.Password != "" {
		user := opt.Username
		if user == "" {
			user = "default"
		}
		fmt.Fprintf(conn, "*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(user), user, len(opt.Password), opt.Password)
	}
	fmt.Fprint(conn, "MONITOR\r\n")
	rd := bufio.NewReaderSize(conn, 1<<20)
	// The replies to AUTH and MONITOR: from the last one on, MONITOR shows every command.
	for n := 1 + btoi(opt.Password != ""); n > 0; n-- {
		if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
			fmt.Fprintf(os.Stderr, "monitor: %q, %v\n", l, err)
			os.Exit(2)
		}
	}
	// After the tests, an ECHO of a marker: MONITOR shows commands in the order
	// Redis ran them, so once it shows the marker it showed every test's command.
	marker := "scriptkeys-end-" + NewID(8)
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if strings.Contains(l, marker) {
				return
			}
			lines = append(lines, strings.TrimSuffix(strings.TrimPrefix(l, "+"), "\r\n"))
		}
	}()
	code := m.Run()
	ec := redis.NewClient(opt)
	err = ec.Echo(context.Background(), marker).Err()
	_ = ec.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "monitor: the end marker:", err)
		os.Exit(2)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(os.Stderr, "monitor: the end marker did not show within 10 s")
		os.Exit(2)
	}
	_ = conn.Close()
	if code == 0 {
		bad, scripts := checkScriptKeys(opt, lines)
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, "script touched a key outside its KEYS:", b)
		}
		if len(bad) > 0 {
			code = 1
		} else if testing.Verbose() {
			fmt.Printf("MONITOR: %d lines, %d scripts of the store's tests touched only their KEYS\n", len(lines), scripts)
		}
	}
	os.Exit(code)
}

// checkScriptKeys reads MONITOR lines; it returns the violations and how
// many scripts of test stores (keys {st…}) it checked.
func checkScriptKeys(opt *redis.Options, lines []string) (bad []string, scripts int) {
	c := redis.NewClient(opt)
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	var keys map[string]bool // the KEYS of the script being read; nil: not a test store's
	var script string
	for _, l := range lines {
		src, args, ok := parseMonitor(l)
		if !ok || len(args) == 0 {
			continue
		}
		if src != "lua" {
			keys = nil
			name := strings.ToLower(args[0])
			if (name == "eval" || name == "evalsha") && len(args) >= 3 {
				n, _ := strconv.Atoi(args[2])
				if n > 0 && len(args) >= 3+n && strings.HasPrefix(args[3], "{st") {
					keys = map[string]bool{}
					for _, k := range args[3 : 3+n] {
						keys[k] = true
					}
					script = args[1]
					if len(script) > 60 {
						script = script[:60]
					}
					scripts++
				}
			}
			continue
		}
		if keys == nil {
			continue
		}
		if n := strings.ToUpper(args[0]); n == "PUBLISH" || n == "SPUBLISH" {
			continue // a channel, not a key
		}
		cmdArgs := make([]any, len(args))
		for i, a := range args {
			cmdArgs[i] = a
		}
		got, err := c.CommandGetKeys(ctx, cmdArgs...).Result()
		if err != nil {
			continue // no keys
		}
		for _, k := range got {
			if !keys[k] {
				bad = append(bad, fmt.Sprintf("%s in %q (script %q…)", k, strings.Join(args, " "), script))
			}
		}
	}
	return bad, scripts
}

// parseMonitor reads `TIME [DB SOURCE] "arg" "arg" …`: the source (an
// address, or "lua") and the arguments unquoted.
func parseMonitor(l string) (src string, args []string, ok bool) {
	i := strings.IndexByte(l, '[')
	j := strings.IndexByte(l, ']')
	if i < 0 || j < i {
		return "", nil, false
	}
	f := strings.Fields(l[i+1 : j])
	if len(f) != 2 {
		return "", nil, false
	}
	src = f[1]
	rest := l[j+1:]
	for {
		k := strings.IndexByte(rest, '"')
		if k < 0 {
			return src, args, true
		}
		rest = rest[k+1:]
		var b strings.Builder
		for len(rest) > 0 {
			ch := rest[0]
			if ch == '"' {
				rest = rest[1:]
				break
			}
			if ch == '\\' && len(rest) > 1 {
				switch rest[1] {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'a':
					b.WriteByte('\a')
				case 'b':
					b.WriteByte('\b')
				case 'x':
					if len(rest) >= 4 {
						v, err := strconv.ParseUint(rest[2:4], 16, 8)
						if err == nil {
							b.WriteByte(byte(v))
							rest = rest[4:]
							continue
						}
					}
					b.WriteByte('x')
				default:
					b.WriteByte(rest[1])
				}
				rest = rest[2:]
				continue
			}
			b.WriteByte(ch)
			rest = rest[1:]
		}
		args = append(args, b.String())
	}
}

func TestParseMonitor(t *testing.T) {
	src, args, ok := parseMonitor(`1796290317.550605 [9 lua] "HSET" "{p}:turn:1" "text" "a \"b\"\\c\x41\n"`)
	if !ok || src != "lua" || len(args) != 4 || args[1] != "{p}:turn:1" || args[3] != "a \"b\"\\cA\n" {
		t.Fatalf("%q %q %v", src, args, ok)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
