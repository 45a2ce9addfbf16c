package provider

import (
	"strings"
	"testing"
)

// R25.1: the agent process gets the turn's TRACEPARENT and TRACESTATE
// (Turn.TraceEnv), never ones the relay itself was started with; with
// traces off it gets none. (Not parallel: t.Setenv.)
func TestExecEnvTraceparent(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	t.Setenv("TRACESTATE", "relay=stale")
	env := func(turn Turn) map[string]string {
		t.Helper()
		res, _, err := runExec(t, ExecConfig{ID: "x", Command: []string{"/usr/bin/env"}}, turn)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		vars := map[string]string{}
		for _, l := range strings.Split(res.Text, "\n") {
			k, v, _ := strings.Cut(l, "=")
			vars[k] = v
		}
		return vars
	}
	off := env(execTurn(t))
	if v, ok := off["TRACEPARENT"]; ok {
		t.Errorf("traces off: the agent sees TRACEPARENT=%s", v)
	}
	if v, ok := off["TRACESTATE"]; ok {
		t.Errorf("traces off: the agent sees TRACESTATE=%s", v)
	}
	turn := execTurn(t)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	turn.TraceEnv = []string{"TRACEPARENT=" + tp, "TRACESTATE=vendor=x"}
	on := env(turn)
	if on["TRACEPARENT"] != tp || on["TRACESTATE"] != "vendor=x" {
		t.Fatalf("traces on: TRACEPARENT=%q TRACESTATE=%q", on["TRACEPARENT"], on["TRACESTATE"])
	}
}
