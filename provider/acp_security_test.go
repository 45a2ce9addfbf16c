package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/oar/relay/internal/testwait"
)

// The acp provider's client side against a hostile agent (R18.25–R18.28).

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, 5*time.Millisecond, cond, "timed out waiting for %s", what)
}

var (
	acpAgentOnce sync.Once
	acpAgentBin  string
	acpAgentErr  error
	acpAgentDir  string
)

// fakeACPAgent builds relaytest's fake ACP agent once.
func fakeACPAgent(t *testing.T) string {
	t.Helper()
	acpAgentOnce.Do(func() {
		acpAgentDir, acpAgentErr = os.MkdirTemp("", "acpagent")
		if acpAgentErr != nil {
			return
		}
		acpAgentBin = filepath.Join(acpAgentDir, "acpagent")
		out, err := exec.Command("go", "build", "-o", acpAgentBin, "github.com/oar/relay/relaytest/agentfake/acpagent").CombinedOutput()
		if err != nil {
			acpAgentErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	if acpAgentErr != nil {
		t.Fatalf("building the fake ACP agent: %v", acpAgentErr)
	}
	return acpAgentBin
}

// R18.27: a handler that panics (here: the host's Partial, called from
// session/update in the SDK's goroutine) ends the turn as an error naming
// the cause; the relay goes on, and the next turn works in a new process.
func TestACPHandlerPanicEndsTheTurn(t *testing.T) {
	bin := fakeACPAgent(t)
	p := NewACP(ACPConfig{ID: "fakeacp", Command: []string{bin}, Env: map[string]string{"FAKE_ACP_STATE": t.TempDir()}})
	defer p.Close()
	cwd := t.TempDir()
	turn := Turn{SessionID: "s1", TurnID: "t1", Cwd: cwd, Prompt: `{"acp": [{"say": "boom"}]}`}
	h := &execHost{onPartial: func(string) { panic("host bug") }}
	_, err := p.Run(context.Background(), turn, h)
	var te *TurnError
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "session/update") || !strings.Contains(te.Msg, "host bug") {
		t.Fatalf("turn with a panicking handler: %v, want a turn error naming session/update and the panic", err)
	}
	turn.TurnID, turn.Prompt = "t2", "hello again"
	res, err := p.Run(context.Background(), turn, &execHost{})
	if err != nil || res.Text != "ANSWER: hello again (prompt 1)" {
		t.Fatalf("the turn after the panic: %q %v", res.Text, err)
	}
}

// R18.27: the recovery itself, for each method the SDK calls.
func TestACPClientRecovers(t *testing.T) {
	pr := &acpProc{p: &ACP{c: ACPConfig{ID: "x"}, log: discardLog()}, failed: make(chan struct{})}
	sid := "acp-1"
	pr.acpSess.Store(&sid)
	pr.cur = &acpTurn{h: nil, tools: map[string]*acpTool{}} // a nil host: every use panics
	c := acpClient{pr}
	err := c.SessionUpdate(context.Background(), acp.SessionNotification{SessionId: acp.SessionId(sid), Update: acp.UpdateAgentMessageText("x")})
	if err == nil || pr.failMsg.Load() == nil || !strings.Contains(*pr.failMsg.Load(), "session/update") {
		t.Fatalf("SessionUpdate panic: err %v, fail %v", err, pr.failMsg.Load())
	}
	select {
	case <-pr.failed:
	default:
		t.Fatalf("the process is not marked failed")
	}
	if !pr.dead() {
		t.Fatalf("a failed process is not dead (the next turn would reuse it)")
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// R18.27: one agent has at most acpInFlight requests in flight; the next
// waits until an answer is written, and is refused after acpSlotWait.
func TestACPInFlightBound(t *testing.T) {
	pr := &acpProc{slots: make(chan struct{}, acpInFlight), quit: make(chan struct{})}
	var stdin lockedBuf
	pr.stdin = &acpStdin{pr: pr, w: &stdin}
	out := &chanPipe{lines: make(chan string, 100)}
	f := &lineFilter{pr: pr, out: out}
	var lines strings.Builder
	for i := 1; i <= acpInFlight+2; i++ {
		fmt.Fprintf(&lines, `{"jsonrpc":"2.0","id":%d,"method":"fs/read_text_file","params":{}}`+"\n", i)
	}
	lines.WriteString(`{"jsonrpc":"2.0","method":"session/update","params":{}}` + "\n")
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		_, _ = f.Write([]byte(lines.String()))
	}()
	eventually(t, "8 requests passed and the 9th waiting", func() bool {
		return len(out.lines) == acpInFlight && pr.slotWait.Load() == 1
	})
	// An answer written frees a place: the 9th goes through, the 10th waits.
	_, _ = pr.stdin.Write([]byte(`{"jsonrpc":"2.0","id":3,"result":{}}` + "\n"))
	eventually(t, "the 9th passed after one answer", func() bool {
		return len(out.lines) == acpInFlight+1 && pr.slotWait.Load() == 1
	})
	// Requests of the relay (id and method) and notifications free nothing.
	_, _ = pr.stdin.Write([]byte(`{"jsonrpc":"2.0","id":99,"method":"session/prompt","params":{}}` + "\n"))
	_, _ = pr.stdin.Write([]byte(`{"jsonrpc":"2.0","method":"session/cancel","params":{}}` + "\n"))
	if len(pr.slots) != acpInFlight {
		t.Fatalf("%d places taken after the relay's own messages, want %d", len(pr.slots), acpInFlight)
	}
	// The process stops: the waiting request is dropped, the filter goes on.
	close(pr.quit)
	<-fed
	if n := len(out.lines); n != acpInFlight+2 {
		t.Fatalf("%d lines passed, want 9 requests and the notification", n)
	}
}

func TestACPInFlightRefusal(t *testing.T) {
	old := acpSlotWait
	acpSlotWait = 10 * time.Millisecond
	defer func() { acpSlotWait = old }()
	pr := &acpProc{slots: make(chan struct{}, acpInFlight), quit: make(chan struct{})}
	var stdin lockedBuf
	pr.stdin = &acpStdin{pr: pr, w: &stdin}
	out := &chanPipe{lines: make(chan string, 100)}
	f := &lineFilter{pr: pr, out: out}
	for i := 1; i <= acpInFlight+1; i++ {
		_, _ = fmt.Fprintf(f, `{"jsonrpc":"2.0","id":"r%d","method":"terminal/wait_for_exit","params":{}}`+"\n", i)
	}
	if len(out.lines) != acpInFlight {
		t.Fatalf("%d requests passed, want %d", len(out.lines), acpInFlight)
	}
	var msg struct {
		ID    string `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdin.String()), &msg); err != nil || msg.ID != "r9" || !strings.Contains(msg.Error.Message, "at most 8 requests") {
		t.Fatalf("the agent was answered %q (%v), want an error for r9", stdin.String(), err)
	}
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type chanPipe struct{ lines chan string }

func (c *chanPipe) Write(b []byte) (int, error) {
	c.lines <- string(b)
	return len(b), nil
}

func (c *chanPipe) CloseWithError(error) error { return nil }

// R18.27: numbers are counted, never added; the answer is bounded.
func TestReadLinesBounds(t *testing.T) {
	text := "one\ntwo\nthree\n"
	for _, c := range []struct {
		line, limit int
		want        string
	}{
		{0, 0, text},
		{2, math.MaxInt, "two\nthree\n"},
		{math.MaxInt, math.MaxInt, ""},
		{2, 1, "two\n"},
		{4, 1, ""},
		{3, 0, "three\n"},
	} {
		got, err := readLines(context.Background(), strings.NewReader(text), c.line, c.limit, 1<<20, 1<<30)
		if err != nil || got != c.want {
			t.Fatalf("readLines(line %d, limit %d) = %q %v, want %q", c.line, c.limit, got, err, c.want)
		}
	}
	// A line longer than the reader's buffer counts as one line.
	long := strings.Repeat("y", 200<<10)
	got, err := readLines(context.Background(), strings.NewReader(long+"\nnext\n"), 2, 1, 1<<20, 1<<30)
	if err != nil || got != "next\n" {
		t.Fatalf("after a long line: %q %v", excerptLine(got, 40), err)
	}
	// Past the bound: an error, reading no further than the bound.
	r := &countingReader{r: strings.NewReader(strings.Repeat("z", 8<<20))}
	if _, err := readLines(context.Background(), r, 0, 0, 1<<20, 1<<30); !errors.Is(err, errReadTooLarge) {
		t.Fatalf("an 8 MiB line: %v, want errReadTooLarge", err)
	}
	if r.n > 2<<20 {
		t.Fatalf("read %d bytes of an 8 MiB file to refuse it", r.n)
	}
	// A line far into the file: the search stops at maxScan.
	r = &countingReader{r: strings.NewReader(strings.Repeat("a\n", 4<<20))}
	if _, err := readLines(context.Background(), r, math.MaxInt, 1, 1<<20, 1<<20); !errors.Is(err, errReadTooFar) {
		t.Fatalf("line 2^63-1 of 8 MiB with a 1 MiB scan: %v, want errReadTooFar", err)
	}
	if r.n > 2<<20 {
		t.Fatalf("read %d bytes to find a line past the scan bound", r.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// R18.25: the turn's folder as a root: dangling and escaping links are
// neither read nor written through, a folder swapped after the root was
// opened is not followed, a FIFO does not hold a read, terminal folders are
// resolved through the root.
func TestACPFolderRoot(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "work")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{dir, outside, filepath.Join(dir, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "sub", "in.txt"), []byte("in\n"), 0o600))
	must(os.Symlink(filepath.Join(outside, "new"), filepath.Join(dir, "dangle")))
	must(os.Symlink("../outside/new2", filepath.Join(dir, "dangle-rel")))
	must(os.Symlink(outside, filepath.Join(dir, "out")))
	must(os.Symlink("sub/in.txt", filepath.Join(dir, "rel-in")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))

	fo, err := openFolder(dir)
	must(err)
	defer fo.close()
	for _, p := range []string{"dangle", "dangle-rel", "out/x", "../outside/y"} {
		if err := fo.write(filepath.Join(dir, p), "x"); err == nil || !strings.Contains(err.Error(), "outside the session's folder") {
			t.Fatalf("write %s: %v, want refused as outside", p, err)
		}
	}
	for _, p := range []string{"new", "new2", "x", "y"} {
		if _, err := os.Lstat(filepath.Join(outside, p)); err == nil {
			t.Fatalf("a write left the folder: %s", p)
		}
	}
	if _, err := fo.openRead(filepath.Join(dir, "out", "secret")); err == nil {
		t.Fatalf("read through a link out")
	}
	f, err := fo.openRead(filepath.Join(dir, "rel-in"))
	must(err)
	_ = f.Close()
	if _, err := fo.openRead(filepath.Join(dir, "fifo")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("read of a FIFO: %v", err)
	}
	if d, err := fo.subdir(filepath.Join(dir, "sub")); err != nil || d != filepath.Join(fo.real, "sub") {
		t.Fatalf("terminal folder sub: %q %v", d, err)
	}
	if _, err := fo.subdir("/"); err == nil {
		t.Fatalf("terminal folder / allowed")
	}
	if _, err := fo.subdir(filepath.Join(dir, "out")); err == nil {
		t.Fatalf("terminal folder through a link out allowed")
	}

	// The folder is swapped for a link to / after the root was opened.
	must(os.Rename(dir, dir+".old"))
	must(os.Symlink("/", dir))
	if _, err := fo.openRead(filepath.Join(dir, "proc", "self", "status")); err == nil {
		t.Fatalf("read /proc/self/status through the swapped folder")
	}
	if _, err := fo.subdir(filepath.Join(dir, "etc")); err == nil {
		t.Fatalf("terminal folder /etc through the swapped folder")
	}
	must(fo.write(filepath.Join(dir, "sub", "still.txt"), "inside"))
	if b, err := os.ReadFile(filepath.Join(dir+".old", "sub", "still.txt")); err != nil || string(b) != "inside" {
		t.Fatalf("the write after the swap: %q %v, want it in the opened folder", b, err)
	}
}

// R18.28: relay_tool is told from structured fields only.
func TestRelayToolCallStructured(t *testing.T) {
	gemini := []acp.PermissionOption{{OptionId: "proceed_always_server", Kind: acp.PermissionOptionKindAllowAlways},
		{OptionId: "proceed_once", Kind: acp.PermissionOptionKindAllowOnce}}
	plain := []acp.PermissionOption{{OptionId: "allow", Kind: acp.PermissionOptionKindAllowOnce}}
	text := func(s string) []acp.ToolCallContent {
		return []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(s))}
	}
	req := func(title string, meta map[string]any, opts []acp.PermissionOption, content []acp.ToolCallContent) acp.RequestPermissionRequest {
		return acp.RequestPermissionRequest{Options: opts, ToolCall: acp.ToolCallUpdate{Title: &title, Meta: meta, Content: content}}
	}
	args := `{"action":"send","relay":"this","text":"hi"}`
	for _, c := range []struct {
		name string
		req  acp.RequestPermissionRequest
		kind acp.ToolKind
		tool string
		want bool
	}{
		{"qwen", req(args, map[string]any{"toolName": "mcp__relay__relay_tool"}, plain, nil), acp.ToolKindOther, "", true},
		{"claude adapter", req("mcp__relay__relay_tool", nil, plain, nil), acp.ToolKindOther, "mcp__relay__relay_tool", true},
		{"gemini", req("relay_tool (relay MCP Server)", nil, gemini, text(args)), acp.ToolKindOther, "", true},
		{"title only", req("relay_tool", nil, plain, nil), acp.ToolKindOther, "", false},
		{"title, kind edit", req("relay_tool", nil, plain, nil), acp.ToolKindEdit, "", false},
		{"qwen shell", req(`{"command":"relay_tool"}`, map[string]any{"toolName": "run_shell_command"}, plain, nil), acp.ToolKindOther, "", false},
		{"relay name, execute", req("x", map[string]any{"toolName": "mcp__relay__relay_tool"}, plain, nil), acp.ToolKindExecute, "", false},
		{"other server", req("x", map[string]any{"toolName": "mcp__other__relay_tool"}, plain, nil), acp.ToolKindOther, "", false},
		{"gemini title, plain options", req("relay_tool (relay MCP Server)", nil, plain, text(args)), acp.ToolKindOther, "", false},
		{"gemini title from command", req("relay_tool (relay MCP Server)", nil, gemini, text(`{"command":"relay_tool (relay MCP Server)"}`)), acp.ToolKindOther, "", false},
		{"gemini, no arguments", req("relay_tool (relay MCP Server)", nil, gemini, nil), acp.ToolKindOther, "", false},
		{"gemini, other server", req("relay_tool (evil MCP Server)", nil, gemini, text(args)), acp.ToolKindOther, "", false},
		// codex-acp (R24.3): kind execute, the MCP approval marked in the
		// request's _meta, server and tool in the call's rawInput.
		{"codex-acp", codex(true), acp.ToolKindExecute, codexName("relay", "relay_tool"), true},
		{"codex-acp, not marked", codex(false), acp.ToolKindExecute, codexName("relay", "relay_tool"), false},
		{"codex-acp, other server", codex(true), acp.ToolKindExecute, codexName("evil", "relay_tool"), false},
		{"codex-acp, shell", codex(true), acp.ToolKindExecute, agentToolName(nil, map[string]any{"server": "relay", "tool": "relay_tool"}), false},
		{"codex-acp, edit", codex(true), acp.ToolKindEdit, codexName("relay", "relay_tool"), false},
	} {
		if got := relayToolCall(c.req, c.kind, metaOr(c.req, c.tool)); got != c.want {
			t.Errorf("%s: relayToolCall = %v, want %v", c.name, got, c.want)
		}
	}
}

// codex is codex-acp's permission request of an MCP call (marked or not).
func codex(marked bool) acp.RequestPermissionRequest {
	r := acp.RequestPermissionRequest{Options: []acp.PermissionOption{{OptionId: "allow_once", Kind: acp.PermissionOptionKindAllowOnce}}}
	if marked {
		r.Meta = map[string]any{"is_mcp_tool_approval": true}
	}
	return r
}

// codexName is the name agentToolName makes of codex-acp's MCP tool_call.
func codexName(server, tool string) string {
	return agentToolName(map[string]any{"is_mcp_tool_call": true},
		map[string]any{"server": server, "tool": tool, "arguments": map[string]any{"action": "send"}})
}

func metaOr(req acp.RequestPermissionRequest, tool string) string {
	if n := metaToolName(req.ToolCall.Meta, req.Meta); n != "" {
		return n
	}
	return tool
}

// R18.26: at acpTermKeep kept terminals the oldest ended one is forgotten;
// when all run, a new one is refused.
func TestACPTermRoom(t *testing.T) {
	pr := &acpProc{terms: map[string]*acpTerm{}}
	for i := range acpTermKeep {
		pr.terms[fmt.Sprint(i)] = &acpTerm{id: fmt.Sprint(i), seq: i, done: make(chan struct{})}
	}
	if _, err := pr.termRoom(); err == nil {
		t.Fatalf("a terminal beyond %d running ones was allowed", acpTermKeep)
	}
	close(pr.terms["5"].done)
	close(pr.terms["3"].done)
	done, err := pr.termRoom()
	if err != nil {
		t.Fatalf("room with ended terminals: %v", err)
	}
	if _, ok := pr.terms["3"]; ok || len(pr.terms) != acpTermKeep-1 {
		t.Fatalf("the oldest ended terminal was not forgotten: %d kept", len(pr.terms))
	}
	// The place is reserved until the terminal is kept.
	done2, err := pr.termRoom()
	if err != nil {
		t.Fatalf("second room: %v", err)
	}
	if _, err := pr.termRoom(); err == nil {
		t.Fatalf("more places handed out than the bound")
	}
	done()
	done2()
}

// A line the SDK cannot decode (it drops it unanswered) takes no place.
func TestACPInFlightUndecodable(t *testing.T) {
	pr := &acpProc{slots: make(chan struct{}, acpInFlight), quit: make(chan struct{})}
	out := &chanPipe{lines: make(chan string, 100)}
	f := &lineFilter{pr: pr, out: out}
	for i := range 20 {
		_, _ = fmt.Fprintf(f, `{"jsonrpc":7,"id":%d,"method":"fs/read_text_file","params":{}}`+"\n", i)
	}
	if len(pr.slots) != 0 || len(out.lines) != 20 {
		t.Fatalf("%d places taken, %d lines passed; want 0 and 20", len(pr.slots), len(out.lines))
	}
}

// R18.27: every method of acpClient (what the SDK calls) recovers: its first
// statement defers recovered. TestACPClientRecovers drives one of them; this
// catches a method added or changed without the guard.
func TestACPClientMethodsAllRecover(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "acp_client.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
			continue
		}
		if id, ok := fn.Recv.List[0].Type.(*ast.Ident); !ok || id.Name != "acpClient" {
			continue
		}
		n++
		guarded := false
		if len(fn.Body.List) > 0 {
			if def, ok := fn.Body.List[0].(*ast.DeferStmt); ok {
				if sel, ok := def.Call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "recovered" {
					guarded = true
				}
			}
		}
		if !guarded {
			t.Errorf("acpClient.%s does not begin with defer c.pr.recovered(…): a panic in it would stop the relay", fn.Name.Name)
		}
	}
	if n < 9 {
		t.Fatalf("found %d acpClient methods in acp_client.go, want the SDK's 9 client methods", n)
	}
}
