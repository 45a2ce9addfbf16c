package api

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oar/relay/domain"
)

// MCP Tasks (R24.1, the extension io.modelcontextprotocol/tasks of MCP
// 2026-07-28). go-sdk v1.8.0 has no tasks: server/discover declares the
// extension through ServerOptions.Capabilities, tasks/get, tasks/update and
// tasks/cancel are custom methods of the server, and a tools/call made a
// task answers its CreateTaskResult through a receiving middleware (a tool
// handler can only return a CallToolResult). The domain decides when a call
// becomes a task (domain.CallToolTask: when it comes to wait).

// TaskDomain is what MCP Tasks need from the domain. A ToolDomain that is
// one declares the extension.
type TaskDomain interface {
	// CallToolTask is CallTool that returns a task (and no result) for a
	// call that comes to wait; the call runs on and its result becomes the task's.
	// ended is called once the call has ended.
	CallToolTask(ctx context.Context, sessionID string, args json.RawMessage, d *domain.Delivery, ended func()) (result json.RawMessage, isError bool, task *domain.ToolTask)
	// ToolTask reads a task of the session; domain.ErrNoTask for none or another session's.
	ToolTask(ctx context.Context, sessionID, taskID string) (*domain.ToolTask, error)
	// CancelToolTask ends a task's wait; domain.ErrNoTask as ToolTask.
	CancelToolTask(ctx context.Context, sessionID, taskID string) error
}

// tasksExtension is the extension's identifier.
const tasksExtension = "io.modelcontextprotocol/tasks"

// taskActions are the actions whose wait may become a task.
var taskActions = func() map[string]bool {
	out := map[string]bool{}
	for _, a := range domain.WaitingActions() {
		out[a] = true
	}
	return out
}()

// taskParams are the params of tasks/get, tasks/update and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID         string         `json:"taskId"`
	InputResponses map[string]any `json:"inputResponses,omitempty"`
}

// taskResult is a CreateTaskResult (resultType "task") or a GetTaskResult
// ("complete"): a Task, flat, with its result when completed.
type taskResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
}

// ackResult is the empty acknowledgement of tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// declaresTasks reports whether a request's capabilities name the extension.
func declaresTasks(c *mcp.ClientCapabilities) bool {
	if c == nil {
		return false
	}
	_, ok := c.Extensions[tasksExtension]
	return ok
}

// taskSlotKey is the context key of a tools/call's taskSlot.
type taskSlotKey struct{}

// taskSlot carries a tools/call's CreateTaskResult from the tool handler to
// the middleware that answers it.
type taskSlot struct {
	res *taskResult
}

// taskCallKey is the context key of a tasks/* request's caller.
type taskCallKey struct{}

type taskCall struct {
	caller   string
	declared bool // the request declares the extension
}

// taskMiddleware lets a tools/call answer its task, and hands tasks/* their
// caller and capabilities.
func taskMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch {
		case method == "tools/call":
			slot := &taskSlot{}
			res, err := next(context.WithValue(ctx, taskSlotKey{}, slot), method, req)
			if err == nil && slot.res != nil {
				return slot.res, nil
			}
			return res, err
		case strings.HasPrefix(method, "tasks/"):
			tc := taskCall{caller: callerOf(req.GetExtra())}
			if sr, ok := req.(*mcp.ServerRequest[*taskParams]); ok {
				tc.declared = declaresTasks(sr.ClientCapabilities())
			}
			return next(context.WithValue(ctx, taskCallKey{}, tc), method, req)
		}
		return next(ctx, method, req)
	}
}

func callerOf(extra *mcp.RequestExtra) string {
	if extra == nil || extra.TokenInfo == nil {
		return ""
	}
	return extra.TokenInfo.UserID
}

// addTaskMethods registers tasks/get, tasks/update and tasks/cancel.
func addTaskMethods(server *mcp.Server, td TaskDomain) error {
	get := func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*taskResult, error) {
		caller, err := taskCaller(ctx, p)
		if err != nil {
			return nil, err
		}
		t, err := td.ToolTask(ctx, caller, p.TaskID)
		if err != nil {
			return nil, taskError(err)
		}
		return taskResultOf(t, "complete"), nil
	}
	cancel := func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*ackResult, error) {
		caller, err := taskCaller(ctx, p)
		if err != nil {
			return nil, err
		}
		if err := td.CancelToolTask(ctx, caller, p.TaskID); err != nil {
			return nil, taskError(err)
		}
		return &ackResult{ResultType: "complete"}, nil
	}
	// No task of the relay ever asks the client for input: tasks/update
	// acknowledges a task the caller has (and ignores the responses).
	update := func(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*ackResult, error) {
		caller, err := taskCaller(ctx, p)
		if err != nil {
			return nil, err
		}
		if _, err := td.ToolTask(ctx, caller, p.TaskID); err != nil {
			return nil, taskError(err)
		}
		return &ackResult{ResultType: "complete"}, nil
	}
	return errors.Join(mcp.AddReceivingCustomMethod(server, "tasks/get", get),
		mcp.AddReceivingCustomMethod(server, "tasks/cancel", cancel),
		mcp.AddReceivingCustomMethod(server, "tasks/update", update))
}

// taskCaller is the caller of a tasks/* request, or the JSON-RPC error for
// one that does not declare the extension (-32021) or names no task.
func taskCaller(ctx context.Context, p *taskParams) (string, error) {
	tc, _ := ctx.Value(taskCallKey{}).(taskCall)
	if tc.caller == "" {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no caller"}
	}
	if !tc.declared {
		return "", &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: "Missing required client capability",
			Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + tasksExtension + `":{}}}}`)}
	}
	if p == nil || p.TaskID == "" {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "taskId is required"}
	}
	return tc.caller, nil
}

// taskError is a task look-up's error as JSON-RPC: none, expired or
// another session's → -32602 (the same answer for each).
func taskError(err error) error {
	if errors.Is(err, domain.ErrNoTask) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "The task could not be read now; try again."}
}

// taskResultOf renders a task; a completed one carries the CallToolResult
// the blocking call would have returned.
func taskResultOf(t *domain.ToolTask, resultType string) *taskResult {
	ttl := t.TTL.Milliseconds()
	out := &taskResult{ResultType: resultType, TaskID: t.ID, Status: t.Status, StatusMessage: t.StatusMessage,
		CreatedAt: isoTime(t.Created), LastUpdatedAt: isoTime(t.Updated), TTLMs: &ttl,
		PollIntervalMs: domain.MCPTaskPollInterval.Milliseconds()}
	if t.Status == domain.TaskCompleted {
		out.Result = callToolResultJSON(t.Result, t.IsError)
	}
	return out
}

// callToolResultJSON is the CallToolResult of an envelope as a tools/call
// of the 2026-07-28 protocol answers it (resultType "complete").
func callToolResultJSON(envelope json.RawMessage, isError bool) json.RawMessage {
	if !isJSONObject(envelope) {
		envelope, isError = envelopeInternal, true
	}
	b, err := json.Marshal(toolResult(envelope, isError))
	if err != nil || len(b) < 2 {
		return nil
	}
	return append(append([]byte(`{"resultType":"complete",`), b[1:len(b)-1]...), '}')
}

func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// callAsTask runs a tools/call of a client that declared the extension
// through the domain's task door: a call that comes to wait answers its
// task through the slot (done=true); else its result as CallTool's. A task
// keeps the call's place among its token's MaxCallsPerToken (r.take) until
// its call ends (R18.18): done=true hands the place over, and the call's
// end releases it.
func (r *mcpRoute) callAsTask(ctx context.Context, td TaskDomain, caller string, args json.RawMessage, d *domain.Delivery) (result json.RawMessage, isError, done bool) {
	slot, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	if slot == nil {
		res, isErr := r.runDomain(ctx, caller, args, d)
		return res, isErr, false
	}
	var (
		mu              sync.Mutex
		isTask, isEnded bool
	)
	ended := func() {
		mu.Lock()
		defer mu.Unlock()
		if isEnded = true; isTask {
			r.release(caller)
		}
	}
	res, isErr, task := td.CallToolTask(ctx, caller, args, d, ended)
	if task == nil {
		return res, isErr, false
	}
	mu.Lock()
	if isTask = true; isEnded {
		r.release(caller)
	}
	mu.Unlock()
	slot.res = taskResultOf(task, "task")
	return nil, false, true
}

var _ TaskDomain = (*domain.Relay)(nil)
