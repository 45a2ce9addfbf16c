package domain

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/oar/relay/scheduler"
)

// FuzzParseArgs feeds relay_tool arguments to parseArgs, the pure part of
// Relay.CallTool that runs before any Redis access: the JSON object is decoded,
// empty values dropped (R3.4), unknown arguments rejected or ignored (R3.5,
// R3.6) and every argument's shape checked (R3.4a). The fuzz input is an
// action name and the bytes of an arguments object; both the bytes as sent and
// the object with "action" spliced in are parsed.
//
// Properties: no panic; a failure is an INVALID_INPUT *Error with a message,
// never a half-built result; a success holds only the action's own arguments,
// each non-empty, valid JSON and of the right shape (so the handlers' typed
// reads cannot fail on them), and parsing its canonical form again gives the
// same arguments.
func FuzzParseArgs(f *testing.F) {
	f.Add("send", []byte(`{"relay":"this","session":"3f9c2a1e","text":"hello","wait_seconds":10}`))
	f.Add("create_session", []byte(`{"relay":"this","text":"go","title":"t","group":"g","cwd":"/tmp","mode":"plan","effort":"high"}`))
	f.Add("create_session", []byte(`{"relay":"this","text":"go","may_create_sessions":true}`))
	f.Add("update_session", []byte(`{"relay":"this","session":"3f9c2a1e","thinking_enabled":"off","auto_compact_window":"200000"}`))
	f.Add("update_session", []byte(`{"relay":"this","session":"3f9c2a1e","mayCreateSessions":true}`))
	f.Add("subscribe", []byte(`{"sessions":["all"],"events":"turn_end","once":true,"match":"(?i)fail","quiet_hours":{"from":"23:00","to":"06:00","tz":"Europe/Berlin"},"exclude":["a"],"digest_minutes":5}`))
	f.Add("schedule", []byte(`{"text":"later","at":"2030-01-02T03:04:05Z","every_minutes":60.0,"title":"nightly"}`))
	f.Add("read_task_output", []byte(`{"relay":"this","session":"s","task_id":"b7k2m9q4","lines":1e3,"unknown":1,"other":null}`))
	f.Add("list_sessions", []byte(`{"relay":"this","limit":-2147483649,"scope":"all"}`))
	f.Add("answer_question", []byte(`{"relay":"this","session":"s","question_id":"q_1","choices":"A","answer":""}`))
	f.Add("ask", []byte(`{"question":"ok?","options":["yes","no",1],"recommendation":"yes"}`))
	f.Add("wait", []byte(`{"relay":"this","session":"s","message_id":"m","wait_seconds":"NaN"}`))
	f.Add("", []byte(`{"action":"list_relays","action":"usage","relay":"this"}`))
	f.Add("bogus", []byte(`{"a":1,"a":{},"b":[],"c":"","d":false}`))
	f.Add("send", []byte(`{"relay":"this",`))
	f.Add("send", []byte(`[1,2]`))
	f.Add("usage", []byte(`{"relay":"this"} trailing`))
	f.Add("send", []byte("{\"text\":\"\xff\xfe\",\"relay\":\"this\",\"session\":\"x\"}"))

	f.Fuzz(func(t *testing.T, action string, raw []byte) {
		checkParse(t, raw)
		checkParse(t, withAction(action, raw))
	})
}

// withAction puts "action": action first into the object raw (or makes an
// object of it alone when raw does not start like one).
func withAction(action string, raw []byte) []byte {
	name, _ := json.Marshal(action)
	rest := bytes.TrimSpace(raw)
	var b bytes.Buffer
	b.WriteString(`{"action":`)
	b.Write(name)
	if !bytes.HasPrefix(rest, []byte("{")) {
		b.WriteString("}")
		return b.Bytes()
	}
	rest = rest[1:]
	if !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("}")) {
		b.WriteString(",")
	}
	b.Write(rest)
	return b.Bytes()
}

func checkParse(t *testing.T, raw []byte) {
	t.Helper()
	a, e := parseArgs(raw)
	if (a == nil) == (e == nil) {
		t.Fatalf("parseArgs(%q) = %v, %v: want exactly one of a result and an error", raw, a, e)
	}
	if e != nil {
		if e.Code != CodeInvalidInput || e.Msg == "" || e.Fields != nil {
			t.Fatalf("parseArgs(%q) error %+v: want INVALID_INPUT with a message and no fields", raw, e)
		}
		return
	}
	known, ok := actionArgs[a.action]
	if !ok {
		t.Fatalf("parseArgs(%q) accepted unknown action %q", raw, a.action)
	}
	isKnown := map[string]bool{}
	for _, k := range known {
		isKnown[k] = true
	}
	inOrder := map[string]bool{}
	for _, k := range a.order {
		inOrder[k] = true
	}
	for k, v := range a.m {
		if !isKnown[k] {
			t.Fatalf("parseArgs(%q) kept %q, not an argument of %s", raw, k, a.action)
		}
		if !inOrder[k] {
			t.Fatalf("parseArgs(%q): %q missing from the order %v", raw, k, a.order)
		}
		if isEmpty(v) || !json.Valid(v) {
			t.Fatalf("parseArgs(%q) kept %s=%q: empty or not JSON", raw, k, v)
		}
		if se := a.checkShape(k); se != nil {
			t.Fatalf("parseArgs(%q) accepted %s=%s of the wrong shape: %v", raw, k, v, se)
		}
		checkTypedRead(t, raw, a, k)
	}
	if len(a.ignored) > maxIgnored {
		t.Fatalf("parseArgs(%q) ignored %d arguments, more than %d", raw, len(a.ignored), maxIgnored)
	}
	if len(a.ignored) > 0 && (a.action == "create_session" || a.action == "update_session") {
		t.Fatalf("parseArgs(%q): %s must reject unknown arguments, ignored %v", raw, a.action, a.ignored)
	}
	for _, k := range a.ignored {
		if isKnown[k] || k == "action" {
			t.Fatalf("parseArgs(%q) ignored %q, an argument of %s", raw, k, a.action)
		}
	}
	if a.has("text") {
		if text, te := promptText(a, nothingDone); te == nil {
			if strings.TrimSpace(text) == "" || len(text) > MaxTextBytes || !utf8.ValidString(text) {
				t.Fatalf("promptText accepted %q", text)
			}
		}
	}
	if v, ok := a.m["quiet_hours"]; ok {
		var qh struct{ From, To, TZ string }
		if json.Unmarshal(v, &qh) == nil {
			if q, err := scheduler.ParseQuiet(qh.From, qh.To, qh.TZ); err == nil && q != nil {
				if q.From == q.To || q.From < 0 || q.From >= 1440 || q.To < 0 || q.To >= 1440 || q.Loc == nil {
					t.Fatalf("ParseQuiet(%q, %q, %q) = %+v", qh.From, qh.To, qh.TZ, q)
				}
			}
		}
	}

	// The canonical form of what was kept parses to the same arguments.
	var b bytes.Buffer
	name, _ := json.Marshal(a.action)
	b.WriteString(`{"action":`)
	b.Write(name)
	for _, k := range a.order {
		v, ok := a.m[k]
		if !ok {
			continue
		}
		kb, _ := json.Marshal(k)
		b.WriteString(",")
		b.Write(kb)
		b.WriteString(":")
		b.Write(v)
	}
	b.WriteString("}")
	again, e2 := parseArgs(b.Bytes())
	if e2 != nil {
		t.Fatalf("parseArgs(%q) kept arguments whose canonical form %q fails: %v", raw, b.Bytes(), e2)
	}
	if again.action != a.action || len(again.m) != len(a.m) || len(again.ignored) != 0 {
		t.Fatalf("parseArgs(%q): canonical form %q parses to %s %v, ignored %v", raw, b.Bytes(), again.action, again.m, again.ignored)
	}
	for k, v := range a.m {
		if !bytes.Equal(again.m[k], v) {
			t.Fatalf("parseArgs(%q): canonical form changed %s from %s to %s", raw, k, v, again.m[k])
		}
	}
}

// checkTypedRead reads an accepted argument the way the handlers do: it must
// not fail, since its shape was checked.
func checkTypedRead(t *testing.T, raw []byte, a *args, k string) {
	t.Helper()
	switch argKinds[k] {
	case "int":
		n, ok, e := a.integer(k)
		if e != nil || !ok || n > math.MaxInt32 || n < math.MinInt32 {
			t.Fatalf("parseArgs(%q): integer(%s) = %d, %v, %v", raw, k, n, ok, e)
		}
		if _, e := a.boundedInt(k, 5, 1, 50); e != nil && e.Code != CodeInvalidInput {
			t.Fatalf("boundedInt(%s): %v", k, e)
		}
	case "strings":
		if _, e := a.strs(k); e != nil {
			t.Fatalf("parseArgs(%q): strs(%s): %v", raw, k, e)
		}
	case "thinking":
		if v, e := a.thinking(); e != nil || (v != "on" && v != "off" && v != "") {
			t.Fatalf("parseArgs(%q): thinking() = %q, %v", raw, v, e)
		}
	case "bool", "object":
	default:
		if _, e := a.str(k); e != nil {
			t.Fatalf("parseArgs(%q): str(%s): %v", raw, k, e)
		}
	}
}
