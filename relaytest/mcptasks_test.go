package relaytest

// R24.1 (MCP Tasks) and R24.2 (notifications without Mcp-Method, a cancelled
// call stops waiting), with a raw JSON-RPC client of the 2026-07-28 protocol
// over real HTTP: each request carries its _meta (protocol version, client
// info, capabilities) and the standard headers, as Claude Code sends them.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oar/relay/store"
)

const tasksExt = "io.modelcontextprotocol/tasks"

// taskClient is a raw JSON-RPC client of one session token.
type taskClient struct {
	t     *testing.T
	url   string
	token string
	tasks bool // its requests declare the Tasks extension
	id    int
}

func newTaskClient(t *testing.T, r *Relay, token string, tasks bool) *taskClient {
	return &taskClient{t: t, url: r.URL + "/mcp", token: token, tasks: tasks}
}

// rpcReply is a JSON-RPC response.
type rpcReply struct {
	Result map[string]any `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// meta is the _meta every request of the 2026-07-28 protocol carries.
func (c *taskClient) meta() map[string]any {
	caps := map[string]any{"roots": map[string]any{}}
	if c.tasks {
		caps["extensions"] = map[string]any{tasksExt: map[string]any{}}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "rawtest", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// post sends one message (id 0: a notification) and returns the HTTP status
// and the response body.
func (c *taskClient) post(msg map[string]any, header map[string]string) (int, []byte) {
	c.t.Helper()
	body, err := json.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Authorization", "Bearer "+c.token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST /mcp: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// call sends a request and returns its response (from a JSON body or the
// event stream's response event).
func (c *taskClient) call(method string, params map[string]any) rpcReply {
	c.t.Helper()
	c.id++
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = c.meta()
	h := map[string]string{"Mcp-Method": method}
	switch {
	case method == "tools/call":
		h["Mcp-Name"] = params["name"].(string)
	case strings.HasPrefix(method, "tasks/"):
		h["Mcp-Name"] = fmt.Sprint(params["taskId"])
	}
	st, data := c.post(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params}, h)
	if st != http.StatusOK && st != http.StatusBadRequest {
		c.t.Fatalf("%s: status %d: %s", method, st, data)
	}
	return parseReply(c.t, data)
}

func parseReply(t *testing.T, data []byte) rpcReply {
	t.Helper()
	msgs := [][]byte{data}
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		msgs = nil
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				msgs = append(msgs, []byte(line))
			}
		}
	}
	for _, m := range msgs {
		var probe struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(m, &probe) == nil && len(probe.ID) > 0 {
			var r rpcReply
			if err := json.Unmarshal(m, &r); err != nil {
				t.Fatalf("decode %s: %v", m, err)
			}
			return r
		}
	}
	t.Fatalf("no JSON-RPC response in %q", data)
	return rpcReply{}
}

// tool calls relay_tool.
func (c *taskClient) tool(args map[string]any) rpcReply {
	c.t.Helper()
	return c.call("tools/call", map[string]any{"name": "relay_tool", "arguments": args})
}

func (c *taskClient) taskGet(id string) rpcReply {
	c.t.Helper()
	return c.call("tasks/get", map[string]any{"taskId": id})
}

// taskEnvelope is a CallToolResult's envelope (its structuredContent).
func taskEnvelope(t *testing.T, res map[string]any) map[string]any {
	t.Helper()
	env, ok := res["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("no structuredContent in %v", res)
	}
	return env
}

// mustTask checks a CreateTaskResult and returns its task id.
func mustTask(t *testing.T, rep rpcReply) string {
	t.Helper()
	res := rep.Result
	if rep.Error != nil || res["resultType"] != "task" || res["status"] != "working" {
		t.Fatalf("want a CreateTaskResult (working), got %+v %v", rep.Error, res)
	}
	for _, k := range []string{"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} {
		if res[k] == nil {
			t.Fatalf("CreateTaskResult without %s: %v", k, res)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, res["createdAt"].(string)); err != nil {
		t.Fatalf("createdAt: %v", err)
	}
	return res["taskId"].(string)
}

// waitTaskEnd polls tasks/get until the task ended and returns its last
// answer; seen collects the working statusMessages.
func waitTaskEnd(t *testing.T, c *taskClient, id string, seen map[string]bool) map[string]any {
	t.Helper()
	var last map[string]any
	Eventually(t, 30*time.Second, func() bool {
		rep := c.taskGet(id)
		if rep.Error != nil {
			t.Fatalf("tasks/get: %+v", rep.Error)
		}
		last = rep.Result
		if last["resultType"] != "complete" || last["taskId"] != id {
			t.Fatalf("tasks/get answered %v", last)
		}
		if last["status"] == "working" {
			seen[fmt.Sprint(last["statusMessage"])] = true
			return false
		}
		return true
	}, "task %s ends", id)
	return last
}

func wantRPCError(t *testing.T, rep rpcReply, code int, what string) {
	t.Helper()
	if rep.Error == nil || rep.Error.Code != code {
		t.Fatalf("%s: want JSON-RPC error %d, got %+v %v", what, code, rep.Error, rep.Result)
	}
}

// R24.1: discover declares the extension; a send that waits is a task whose
// tasks/get is working (queued / running) and then completed with exactly
// the result of the blocking call; another token does not find it, a client
// without the extension blocks as before, and a restarted relay (and a
// second serve process on one Redis) still answers it.
func TestMCPTasksSend(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	other := r.NewSession(map[string]any{"title": "other"})
	c := newTaskClient(t, r, w.Token, true)
	plain := newTaskClient(t, r, w.Token, false)

	disc := c.call("server/discover", nil)
	caps, _ := disc.Result["capabilities"].(map[string]any)
	exts, _ := caps["extensions"].(map[string]any)
	if _, ok := exts[tasksExt]; !ok || disc.Error != nil {
		t.Fatalf("server/discover does not declare %s: %+v %v", tasksExt, disc.Error, disc.Result)
	}

	text := Script(map[string]any{"sleep_ms": 1500}, map[string]any{"reply": "task reply"})
	id := mustTask(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": text, "wait_seconds": 15}))

	wantRPCError(t, newTaskClient(t, r, other.Token, true).taskGet(id), -32602, "tasks/get with another token")
	wantRPCError(t, plain.taskGet(id), -32021, "tasks/get without the extension")
	wantRPCError(t, c.taskGet("task_nosuchtask"), -32602, "tasks/get of no task")

	seen := map[string]bool{}
	done := waitTaskEnd(t, c, id, seen)
	if done["status"] != "completed" {
		t.Fatalf("task ended %v", done)
	}
	if !seen["queued"] && !seen["running"] && !seen["running: task reply"] {
		t.Errorf("no working statusMessage queued/running was seen: %v", seen)
	}
	res, _ := done["result"].(map[string]any)
	env := taskEnvelope(t, res)
	if env["status"] != "done" || env["reply"].(map[string]any)["text"] != "task reply" {
		t.Fatalf("task result: %v", env)
	}
	// The blocking call's result for that message, from a client without the
	// extension: the same CallToolResult.
	// (Its summary names its action, wait; _meta is the SDK's serverInfo of
	// every response.)
	blocking := plain.tool(map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": env["message_id"], "wait_seconds": 15})
	delete(blocking.Result, "_meta")
	asSend := func(v any) any {
		b, _ := json.Marshal(v)
		var out any
		_ = json.Unmarshal(bytes.ReplaceAll(b, []byte("wait → desk"), []byte("send → desk")), &out)
		return out
	}
	if blocking.Result["resultType"] == "task" || !reflect.DeepEqual(asSend(blocking.Result), asSend(res)) || reflect.DeepEqual(asSend(blocking.Result), blocking.Result) {
		t.Fatalf("task result differs from the blocking call's:\n task     %v\n blocking %v", res, blocking.Result)
	}
	// A client without the extension gets today's blocking call.
	env2 := taskEnvelope(t, plain.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID,
		"text": Script(map[string]any{"sleep_ms": 300}, map[string]any{"reply": "blocking"}), "wait_seconds": 15}).Result)
	if env2["status"] != "done" {
		t.Fatalf("blocking send: %v", env2)
	}
	// A call that does not wait (wait_seconds 0) is an ordinary result.
	env3 := c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "no wait", "wait_seconds": 0}).Result
	if env3["resultType"] == "task" || taskEnvelope(t, env3)["ok"] != true {
		t.Fatalf("send without a wait: %v", env3)
	}
	// A check that fails is an ordinary result, never a task.
	bad := c.tool(map[string]any{"action": "send", "relay": "this", "session": w.ID, "text": "self", "wait_seconds": 15}).Result
	if bad["resultType"] == "task" || taskEnvelope(t, bad)["code"] != "REMOTE_RELAY_SELF" {
		t.Fatalf("send to itself: %v", bad)
	}

	// A second serve process on the same Redis answers it.
	if !EmbeddedMode() {
		r2 := Start(t, Options{Redis: r.Redis})
		got := newTaskClient(t, r2, w.Token, true).taskGet(id)
		if got.Error != nil || !reflect.DeepEqual(got.Result, done) {
			t.Fatalf("second process: %+v %v", got.Error, got.Result)
		}
		r2.Stop()
	}
	// A restart keeps it.
	r.Stop()
	r3 := Start(t, Options{Redis: r.Redis})
	got := newTaskClient(t, r3, w.Token, true).taskGet(id)
	if got.Error != nil || !reflect.DeepEqual(got.Result, done) {
		t.Fatalf("after a restart: %+v %v", got.Error, got.Result)
	}
}

// R24.1: a card waiting for the owner keeps the task working (the client is
// gone between polls) until the owner decides; then it completes.
func TestMCPTasksCard(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	ext := r.NewSession(map[string]any{"provider": "external", "title": "my terminal claude"})
	c := newTaskClient(t, r, ext.Token, true)
	id := mustTask(t, c.tool(map[string]any{"action": "create_session", "relay": "this", "text": "hello from a task", "wait_seconds": 15}))
	card := r.WaitCard(ext.ID)
	if got := c.taskGet(id).Result; got["status"] != "working" || got["statusMessage"] != "waiting for the owner's approval" {
		t.Fatalf("task while the card waits: %v", got)
	}
	r.Decide(card["id"].(string), "allow")
	done := waitTaskEnd(t, c, id, map[string]bool{})
	env := taskEnvelope(t, done["result"].(map[string]any))
	if done["status"] != "completed" || env["status"] != "done" || env["reply"].(map[string]any)["text"] != "echo: hello from a task" {
		t.Fatalf("task after Allow: %v", done)
	}

	// Denied: the task completes with the blocking call's refusal.
	if st := r.Owner(http.MethodPatch, "/api/v1/sessions/"+ext.ID, map[string]any{"mode": "ask"}, nil); st != http.StatusOK {
		t.Fatalf("patch mode: %d", st)
	}
	id = mustTask(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": env["session"], "text": "again", "wait_seconds": 15}))
	card = r.WaitCard(ext.ID)
	r.Decide(card["id"].(string), "deny")
	done = waitTaskEnd(t, c, id, map[string]bool{})
	res := done["result"].(map[string]any)
	if done["status"] != "completed" || res["isError"] != true || taskEnvelope(t, res)["code"] != "REMOTE_RELAY_PERMISSION" {
		t.Fatalf("task after Deny: %v", done)
	}
}

// R24.1: tasks/cancel stops the waiting (the turn goes on) and the task is
// cancelled, also after the turn ended.
func TestMCPTasksCancel(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	c := newTaskClient(t, r, w.Token, true)
	text := Script(map[string]any{"sleep_ms": 1500}, map[string]any{"reply": "goes on"})
	id := mustTask(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": text, "wait_seconds": 15}))
	if rep := c.call("tasks/cancel", map[string]any{"taskId": id}); rep.Error != nil || rep.Result["resultType"] != "complete" {
		t.Fatalf("tasks/cancel: %+v %v", rep.Error, rep.Result)
	}
	if got := c.taskGet(id).Result; got["status"] != "cancelled" {
		t.Fatalf("after tasks/cancel: %v", got)
	}
	mid := promptID(t, r, b.ID, agentLine("watcher", "scripted-1")+"\n"+text)
	if tr := r.WaitTurn(mid, ev2Wait, "done", "error", "stopped"); tr.Status != "done" {
		t.Fatalf("the turn did not go on: %s %s", tr.Status, tr.Error)
	}
	if got := c.taskGet(id).Result; got["status"] != "cancelled" || got["result"] != nil {
		t.Fatalf("after the turn ended: %v", got)
	}
	wantRPCError(t, newTaskClient(t, r, b.Token, true).call("tasks/cancel", map[string]any{"taskId": id}), -32602, "tasks/cancel with another token")
}

// R24.2: notifications without an Mcp-Method header are accepted, and a
// notifications/cancelled ends the named call's wait at once: the blocking
// send returns while its turn still runs.
func TestMCPNotificationsWithoutMethod(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	c := newTaskClient(t, r, w.Token, false)
	note := func(method string, params map[string]any) int {
		st, body := c.post(map[string]any{"jsonrpc": "2.0", "method": method, "params": params}, nil)
		if st != http.StatusAccepted {
			t.Fatalf("%s without Mcp-Method: status %d %s", method, st, body)
		}
		return st
	}
	note("notifications/initialized", map[string]any{})

	text := Script(map[string]any{"sleep_ms": 6000}, map[string]any{"reply": "late"})
	type out struct{ rep rpcReply }
	ch := make(chan out, 1)
	c.id = 41 // the call below is id 42
	go func() {
		ch <- out{c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": text, "wait_seconds": 30})}
	}()
	mid := promptID(t, r, b.ID, agentLine("watcher", "scripted-1")+"\n"+text)
	r.WaitTurn(mid, ev2Wait, "running")
	note("notifications/cancelled", map[string]any{"requestId": 42, "reason": "user pressed Esc"})
	got := <-ch
	env := taskEnvelope(t, got.rep.Result)
	if env["status"] == "done" {
		t.Fatalf("the cancelled call waited for the reply: %v", env)
	}
	if tr := r.Turn(mid); tr.Status != "running" {
		t.Fatalf("turn %s after the cancelled call returned, want running", tr.Status)
	}
}

// R24.1: the wait action is a task too; a relay that shuts down completes
// its tasks with what the calls have then (the turn queued or running, its
// message_id), and the restarted relay answers them.
func TestMCPTasksWaitAndShutdown(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{})
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	c := newTaskClient(t, r, w.Token, true)
	sent := taskEnvelope(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID,
		"text": Script(map[string]any{"sleep_ms": 800}, map[string]any{"reply": "waited"}), "wait_seconds": 0}).Result)
	id := mustTask(t, c.tool(map[string]any{"action": "wait", "relay": "this", "session": b.ID, "message_id": sent["message_id"], "wait_seconds": 15}))
	done := waitTaskEnd(t, c, id, map[string]bool{})
	if env := taskEnvelope(t, done["result"].(map[string]any)); env["status"] != "done" || env["reply"].(map[string]any)["text"] != "waited" {
		t.Fatalf("wait as a task: %v", done)
	}

	id = mustTask(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID,
		"text": Script(map[string]any{"sleep_ms": 60000}, map[string]any{"reply": "never seen"}), "wait_seconds": 15}))
	r.Stop()
	r2 := Start(t, Options{Redis: r.Redis})
	got := newTaskClient(t, r2, w.Token, true).taskGet(id).Result
	res, _ := got["result"].(map[string]any)
	if got["status"] != "completed" || res == nil {
		t.Fatalf("task of a relay that stopped, after the restart: %v", got)
	}
	env := taskEnvelope(t, res)
	if got["status"] != "completed" || (env["status"] != "running" && env["status"] != "queued") || env["message_id"] == nil {
		t.Fatalf("task of a relay that stopped: %v", got)
	}
}

// R24.1 with R18.18: a task keeps its call's place among the 16 a token may
// have running until its call ends: the 17th waiting call is
// REMOTE_RELAY_BUSY (an ordinary result, nothing done); once a task is
// cancelled (from another process), its call ends and its place is free again.
func TestMCPTasksBusy(t *testing.T) {
	t.Parallel()
	r := Start(t, Options{MaxWaitCap: 120 * time.Second}) // the calls' own waits (the longest wait, 60 s) outlast the check below
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	c := newTaskClient(t, r, w.Token, true)
	long := Script(map[string]any{"sleep_ms": 60000}, map[string]any{"reply": "late"})
	taskEnvelope(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": long, "wait_seconds": 0}).Result)
	send := func() rpcReply {
		return c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": "queued behind", "wait_seconds": 120})
	}
	var first string
	for i := range 16 {
		id := mustTask(t, send())
		if i == 0 {
			first = id
		}
	}
	busy := send().Result
	if busy["resultType"] == "task" || taskEnvelope(t, busy)["code"] != "REMOTE_RELAY_BUSY" {
		t.Fatalf("17th waiting call: %v", busy)
	}
	// Cancelled through another serve process on the same Redis (when there
	// is one): the call on this one stops waiting.
	canceller := c
	if !EmbeddedMode() {
		canceller = newTaskClient(t, Start(t, Options{Redis: r.Redis, MaxWaitCap: 120 * time.Second}), w.Token, true)
	}
	if rep := canceller.call("tasks/cancel", map[string]any{"taskId": first}); rep.Error != nil {
		t.Fatalf("tasks/cancel: %+v", rep.Error)
	}
	Eventually(t, 30*time.Second, func() bool {
		rep := send()
		if rep.Result["resultType"] == "task" {
			return true
		}
		if code := taskEnvelope(t, rep.Result)["code"]; code != "REMOTE_RELAY_BUSY" {
			t.Fatalf("after a cancel: %v", rep.Result)
		}
		return false
	}, "a place freed by the cancelled task")
}

// R24.1: a task lives in the store, not in the process that got its call. A
// `relay serve` child that got a send made a task is SIGKILLed while the
// task works; tasks/get on another serve process of the relay (same Redis
// and prefix) completes it, once the child is no longer seen, as a graceful
// stop would have: with the result of a wait for its turn (the turn, run or
// recovered elsewhere, ends; its status and message_id, the reply if done),
// and a call still on the owner's card with an error saying nothing was
// sent, the card withdrawn.
func TestMCPTasksProcessKilled(t *testing.T) {
	NeedsSharedRedis(t, "a `relay serve` child and an in-process relay on one Redis")
	if testing.Short() {
		t.Skip("builds the relay binary and waits about a minute for the killed process to count as gone")
	}
	t.Parallel()
	rd := NewRedis(t)
	r := Start(t, Options{Redis: rd})
	child := startPeerProc(t, "killed", r.Config.Name, rd, "")
	w := r.NewSession(map[string]any{"title": "watcher"})
	b := r.NewSession(map[string]any{"title": "beta"})
	c := &taskClient{t: t, url: child.api.URL + "/mcp", token: w.Token, tasks: true}
	text := Script(map[string]any{"sleep_ms": 4000}, map[string]any{"reply": "after the kill"})
	id := mustTask(t, c.tool(map[string]any{"action": "send", "relay": "this", "session": b.ID, "text": text, "wait_seconds": 60}))
	ext := r.NewSession(map[string]any{"provider": "external", "title": "my terminal claude"})
	ce := &taskClient{t: t, url: child.api.URL + "/mcp", token: ext.Token, tasks: true}
	cardTask := mustTask(t, ce.tool(map[string]any{"action": "create_session", "relay": "this", "text": "never created", "wait_seconds": 60}))
	card := r.WaitCard(ext.ID)

	cmd, exited := child.take()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited //nolint:errcheck // killed: its exit status says nothing
	killed := time.Now()

	c2 := newTaskClient(t, r, w.Token, true)
	if got := c2.taskGet(id).Result; got["status"] != "working" {
		t.Fatalf("task right after its process was killed: %v", got)
	}
	end := func(c *taskClient, id string) map[string]any {
		var last map[string]any
		Eventually(t, 180*time.Second, func() bool {
			rep := c.taskGet(id)
			if rep.Error != nil {
				t.Fatalf("tasks/get: %+v", rep.Error)
			}
			last = rep.Result
			return last["status"] != "working"
		}, "the task %s of the killed process ends", id)
		return last
	}
	done := end(c2, id)
	t.Logf("the task ended %s after its process was killed", time.Since(killed).Round(100*time.Millisecond))
	cardDone := end(newTaskClient(t, r, ext.Token, true), cardTask)
	cres, _ := cardDone["result"].(map[string]any)
	if cardDone["status"] != "completed" || cres["isError"] != true || !strings.Contains(fmt.Sprint(taskEnvelope(t, cres)["error"]), "Nothing was sent.") {
		t.Fatalf("card task of the killed process: %v", cardDone)
	}
	for _, pc := range r.Cards() {
		if pc["id"] == card["id"] {
			t.Fatalf("the card of the killed process's call is still pending: %v", pc)
		}
	}
	res, _ := done["result"].(map[string]any)
	if done["status"] != "completed" || res == nil {
		t.Fatalf("task of the killed process: %v", done)
	}
	env := taskEnvelope(t, res)
	mid, _ := env["message_id"].(string)
	if env["ok"] != true || mid == "" {
		t.Fatalf("task result of the killed process: %v", env)
	}
	turn := r.WaitTurn(mid, 60*time.Second, store.TurnDone, store.TurnError, store.TurnStopped)
	t.Logf("task result: status %v; the turn ended %s", env["status"], turn.Status)
	switch env["status"] {
	case "done":
		if reply, _ := env["reply"].(map[string]any); turn.Status != store.TurnDone || reply["text"] != "after the kill" {
			t.Fatalf("task result %v, turn %s %q", env, turn.Status, turn.Reply)
		}
	case "error", "queued", "running":
	default:
		t.Fatalf("task result of the killed process: %v", env)
	}
	// Completed once: a later poll answers the same.
	if again := c2.taskGet(id).Result; !reflect.DeepEqual(again, done) {
		t.Fatalf("a second tasks/get: %v, first %v", again, done)
	}
}
