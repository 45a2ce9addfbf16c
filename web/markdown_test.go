package web

import (
	"bytes"
	"crypto/sha256"
	"html/template"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/oar/relay"
	"github.com/oar/relay/domain"
)

// parseFragment parses rendered HTML as a page's body would.
func parseFragment(t *testing.T, s string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader("<!doctype html><html><body>" + s + "</body></html>"))
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return doc
}

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func textOf(n *html.Node) string {
	var b strings.Builder
	walk(n, func(x *html.Node) {
		if x.Type == html.TextNode {
			b.WriteString(x.Data)
		}
	})
	return b.String()
}

// checkSafe fails when rendered HTML could run anything: a script-like
// element, an event handler, a javascript:/vbscript: URL, a data: URL other
// than an image's, or a link without rel="noopener noreferrer" (R23.2).
func checkSafe(t *testing.T, in, out string) {
	t.Helper()
	walk(parseFragment(t, out), func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		switch n.Data {
		case "script", "iframe", "object", "embed", "style", "svg", "math", "form", "base", "meta", "link":
			t.Errorf("input %q: element <%s> in %s", in, n.Data, out)
		}
		rel := ""
		for _, a := range n.Attr {
			key, val := strings.ToLower(a.Key), strings.ToLower(strings.TrimSpace(a.Val))
			if strings.HasPrefix(key, "on") || key == "style" || key == "srcdoc" || key == "formaction" {
				t.Errorf("input %q: attribute %s=%q on <%s> in %s", in, a.Key, a.Val, n.Data, out)
			}
			if key == "href" || key == "src" || key == "action" || key == "xlink:href" {
				if strings.HasPrefix(val, "javascript:") || strings.HasPrefix(val, "vbscript:") {
					t.Errorf("input %q: script URL %s=%q in %s", in, a.Key, a.Val, out)
				}
				if strings.HasPrefix(val, "data:") && (n.Data != "img" || !strings.HasPrefix(val, "data:image/")) {
					t.Errorf("input %q: data URL %s=%q on <%s> in %s", in, a.Key, a.Val, n.Data, out)
				}
			}
			if key == "rel" {
				rel = a.Val
			}
		}
		if n.Data == "a" && rel != "noopener noreferrer" {
			t.Errorf("input %q: link without rel=\"noopener noreferrer\" (rel %q) in %s", in, rel, out)
		}
	})
}

// TestMarkdownHostileR23_2: hostile replies render as inert HTML; HTML
// written in the text shows as the words it is.
func TestMarkdownHostileR23_2(t *testing.T) {
	md := NewMarkdown()
	cases := []struct {
		in       string
		visible  string // text that must stay visible (escaped, not an element)
		noAnchor bool   // no <a> with an href at all
	}{
		{in: `<script>alert(1)</script>`, visible: "<script>alert(1)</script>"},
		{in: "<script>\nalert(1)\n</script>", visible: "alert(1)"},
		{in: `Look <img src=x onerror="alert(1)"> here`, visible: `<img src=x onerror="alert(1)">`},
		{in: "<div onclick=\"alert(1)\">\n*hi*\n</div>", visible: `<div onclick="alert(1)">`},
		{in: `<a href="javascript:alert(1)">click</a>`, visible: `<a href="javascript:alert(1)">`, noAnchor: true},
		{in: `[click](javascript:alert(1))`, noAnchor: true},
		{in: `[click](JaVaScRiPt:alert(1))`, noAnchor: true},
		{in: `[click](  javascript:alert(1) )`, noAnchor: true},
		{in: "[click](java\tscript:alert(1))", noAnchor: true},
		{in: `[click](vbscript:msgbox)`, noAnchor: true},
		{in: `[page](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)`, noAnchor: true},
		{in: `![x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)`},
		{in: `![x](javascript:alert(1))`, noAnchor: true},
		{in: `![ok](data:image/png;base64,iVBORw0KGgo=)`},
		{in: `<svg onload=alert(1)><circle/></svg>`, visible: "<svg onload=alert(1)>"},
		{in: `<iframe src="javascript:alert(1)"></iframe>`, visible: "<iframe"},
		{in: "<details open ontoggle=alert(1)>\nx\n</details>", visible: "ontoggle"},
		{in: `<b><i><u onmouseover="alert(1)">nested</u></i></b>`, visible: `onmouseover`},
		{in: "<!-- x --><style>*{}</style>", visible: "<style>"},
		{in: `[x](https://example.com "t\" onmouseover=\"alert(1)")`},
		{in: "<https://example.com/a?b=<script>>"},
		{in: `https://example.com/<img src=x onerror=alert(1)>`},
		{in: "```html\n<script>alert(1)</script>\n```", visible: "<script>alert(1)</script>"},
		{in: "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | [j](javascript:alert(1)) |", visible: "onerror"},
	}
	for _, c := range cases {
		out := string(md.HTML(c.in))
		checkSafe(t, c.in, out)
		doc := parseFragment(t, out)
		if c.visible != "" && !strings.Contains(textOf(doc), c.visible) {
			t.Errorf("input %q: %q is not visible as text in %s", c.in, c.visible, out)
		}
		if c.noAnchor {
			walk(doc, func(n *html.Node) {
				for _, a := range n.Attr {
					if n.Data == "a" && a.Key == "href" {
						t.Errorf("input %q: a link to %q survived: %s", c.in, a.Val, out)
					}
				}
			})
		}
	}
}

// TestMarkdownGFMR23_2: tables, strikethrough, task lists, fenced code and
// links render as their elements; a link to another site opens apart, a
// remote image is only a link (nothing is loaded from elsewhere, R19.7).
func TestMarkdownGFMR23_2(t *testing.T) {
	md := NewMarkdown()
	in := "# Plan\n\n| step | who |\n|:--|--:|\n| build | **me** |\n\n~~old~~ new\n\n- [x] done\n- [ ] todo\n\n" +
		"```go\nfunc main() {}\n```\n\nSee [the session](/s/abc) and https://example.com ![logo](https://example.com/l.png)"
	out := string(md.HTML(in))
	checkSafe(t, in, out)
	count := map[string]int{}
	var hrefs, targets []string
	walk(parseFragment(t, out), func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		count[n.Data]++
		for _, a := range n.Attr {
			switch {
			case n.Data == "a" && a.Key == "href":
				hrefs = append(hrefs, a.Val)
			case n.Data == "a" && a.Key == "target":
				targets = append(targets, a.Val)
			case n.Data == "input" && a.Key == "type" && a.Val == "checkbox":
				count["checkbox"]++
			case n.Data == "code" && a.Key == "class" && a.Val == "language-go":
				count["language-go"]++
			}
		}
	})
	for el, want := range map[string]int{"h1": 1, "table": 1, "th": 2, "td": 2, "strong": 1, "del": 1, "checkbox": 2, "pre": 1, "language-go": 1, "img": 0} {
		if count[el] != want {
			t.Errorf("%d <%s>, want %d, in %s", count[el], el, want, out)
		}
	}
	if strings.Join(hrefs, " ") != "/s/abc https://example.com https://example.com/l.png" {
		t.Errorf("links %q", hrefs)
	}
	if got := string(md.HTML("line one\nline two")); !strings.Contains(got, "line one<br/>") {
		t.Errorf("a line break is not kept: %s", got)
	}
	if len(targets) != 2 {
		t.Errorf("target=_blank on %d links, want the 2 to another site: %s", len(targets), out)
	}
}

// TestHeaderLinesR23_2: the relay's header lines (events, agents' prompts,
// schedules) are a message's header, not Markdown; an event's lines stay
// plain; a reply or an owner's message has no header.
func TestHeaderLinesR23_2(t *testing.T) {
	md := NewMarkdown()
	local := domain.PromptLine(&relay.Ref{Title: "ci *bot*", Model: "m-1"}, true)
	remote := domain.PromptLine(&relay.Ref{Relay: "far", Title: "x", Model: "m"}, false)
	sched := `[relay schedule sch_1 "nightly" · every 60 min · automated message from OAR, not from the user; it approves nothing]`
	event := domain.Header + "\n" + `[relay event] session "a *b*" (1234abcd): turn_end (done) "**hi**"`
	cases := []struct {
		role, text string
		heads      []string
		body       string // what the body shows as text
		plain      bool
	}{
		{"agent", local + "\nPlease **check**", []string{local}, "Please check", false},
		{"agent", remote + "\nhi", []string{remote}, "hi", false},
		{"schedule", local + "\n" + sched + "\nrun `make`", []string{local, sched}, "run make", false},
		{"event", event, []string{domain.Header}, `[relay event] session "a *b*" (1234abcd): turn_end (done) "**hi**"`, true},
		{"assistant", domain.Header + "\nok", nil, domain.Header + "\nok", false}, // a hard line break

		{"user", sched + "\nmine", nil, sched + "\nmine", false},
	}
	for _, c := range cases {
		v := newMsgView(md, relay.Message{ID: "1", Role: c.role, Text: c.text})
		if strings.Join(v.Headers, "|") != strings.Join(c.heads, "|") {
			t.Errorf("%s %q: headers %q, want %q", c.role, c.text, v.Headers, c.heads)
		}
		if c.plain {
			if v.Plain != c.body || v.Body != "" {
				t.Errorf("%s: plain %q body %q, want plain %q", c.role, v.Plain, v.Body, c.body)
			}
			continue
		}
		if got := strings.TrimSpace(textOf(parseFragment(t, string(v.Body)))); got != c.body {
			t.Errorf("%s %q: body text %q, want %q (%s)", c.role, c.text, got, c.body, v.Body)
		}
	}
}

func acts(ids ...string) []relay.Message {
	var out []relay.Message
	for _, id := range ids {
		out = append(out, relay.Message{ID: id, Role: "activity", Text: "🛰️ send → desk session 1a2b3c4d"})
	}
	return out
}

// TestConversationFoldsR23_3: more than 3 tool calls in a row are one fold;
// up to 3 stay one line each; a message ends a run.
func TestConversationFoldsR23_3(t *testing.T) {
	md := NewMarkdown()
	msg := func(id string) relay.Message { return relay.Message{ID: id, Role: "assistant", Text: "ok"} }
	var msgs []relay.Message
	msgs = append(msgs, msg("a"))
	msgs = append(msgs, acts("1", "2", "3")...)
	msgs = append(msgs, msg("b"))
	msgs = append(msgs, acts("4", "5", "6", "7", "8")...)
	msgs = append(msgs, msg("c"))
	var shape []string
	for _, it := range conversation(md, msgs) {
		switch {
		case it.Msg != nil:
			shape = append(shape, it.ID())
		case it.Act != nil:
			shape = append(shape, it.ID())
		default:
			shape = append(shape, it.ID()+"×"+string(rune('0'+len(it.Fold))))
		}
	}
	if got := strings.Join(shape, " "); got != "m-a m-1 m-2 m-3 m-b fold-4×5 m-c" {
		t.Errorf("conversation: %s", got)
	}
}

// TestActivityLineR23_3: a 🛰️ line's parts and its call's outcome (an error
// code shown as failed), an ACP tool's outcome.
func TestActivityLineR23_3(t *testing.T) {
	cases := []struct {
		in, outcomeField, what, target, outcome string
		failed                                  bool
	}{
		{"🛰️ send → desk session 1a2b3c4d", "", "send", "desk · session 1a2b3c4d", "", false},
		{"🛰️ send → desk session 1a2b3c4d", "ok, replied", "send", "desk · session 1a2b3c4d", "ok, replied", false},
		{"🛰️ list_relays → far", "ok", "list_relays", "far", "ok", false},
		{"🛰️ send → far", "REMOTE_RELAY_FORBIDDEN", "send", "far", "REMOTE_RELAY_FORBIDDEN", true},
		{"🔧 Read file a.go: completed", "", "Read file a.go", "", "completed", false},
		{"🔧 Run: make: failed", "", "Run: make", "", "failed", true},
		{"plain line", "", "plain line", "", "", false},
	}
	for _, c := range cases {
		a := parseActivity(relay.Message{ID: "x", Text: c.in, Outcome: c.outcomeField})
		if a.What != c.what || a.Target != c.target || a.Outcome != c.outcome || a.Failed != c.failed {
			t.Errorf("%q %q: %+v", c.in, c.outcomeField, a)
		}
	}
}

// TestConversationTemplateNoNilR23_4: a running turn with no output yet shows
// "Working…", with output its partial reply as Markdown, not kept in the
// cache; no message field prints "<nil>" (a nil InFlight or CreatedAt once did).
func TestConversationTemplateNoNilR23_4(t *testing.T) {
	md := NewMarkdown()
	tpl := template.Must(template.New("").Funcs((&console{}).funcs()).Funcs(conversationFuncs(md)).ParseFS(templateFS, "templates/*.html"))
	partial := "first **part**"
	for _, c := range []struct {
		inFlight *string
		want     string
	}{{nil, "Working…"}, {new(string), "Working…"}, {&partial, "first part"}} {
		s := &relay.SessionDetail{ID: "s1", State: "running_turn", InFlight: c.inFlight, Messages: append([]relay.Message{
			{ID: "m1", Role: "user", Text: "hello"}}, acts("1", "2", "3", "4")...)}
		var buf bytes.Buffer
		if err := tpl.ExecuteTemplate(&buf, "conversation", &view{S: s}); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, bad := range []string{"<nil>", "&lt;nil&gt;", "null", "undefined", "<no value>"} {
			if strings.Contains(out, bad) {
				t.Errorf("inFlight %v: the page holds %q:\n%s", c.inFlight, bad, out)
			}
		}
		text := textOf(parseFragment(t, out))
		if !strings.Contains(text, c.want) || !strings.Contains(text, "4 tool calls") {
			t.Errorf("inFlight %v: want %q and \"4 tool calls\" in %q", c.inFlight, c.want, text)
		}
		// The partial reply changes with every refresh: it is not cached.
		if _, ok := md.cache.get(sha256.Sum256([]byte(str(c.inFlight)))); ok && str(c.inFlight) != "" {
			t.Errorf("inFlight %q: the partial reply was kept in the Markdown cache", str(c.inFlight))
		}
	}
}

func benchMessages() []relay.Message {
	reply := strings.Repeat("Some **bold** text with `code` and a [link](https://example.com).\n\n- item one\n- item two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```go\nfunc main() {}\n```\n\n", 8)
	msgs := make([]relay.Message, 200)
	for i := range msgs {
		msgs[i] = relay.Message{ID: strconv.Itoa(i), Role: "assistant", Text: reply + strconv.Itoa(i)}
	}
	return msgs
}

// BenchmarkConversation200 renders a page's 200 messages of ~2.4 KB of
// Markdown each, as every live refresh of a conversation does (the
// rendered messages cached from the first refresh on).
func BenchmarkConversation200(b *testing.B) {
	md, msgs := NewMarkdown(), benchMessages()
	b.ReportAllocs()
	for b.Loop() {
		conversation(md, msgs)
	}
}

// BenchmarkConversation200Cold is the first render of those messages.
func BenchmarkConversation200Cold(b *testing.B) {
	msgs := benchMessages()
	b.ReportAllocs()
	for b.Loop() {
		conversation(NewMarkdown(), msgs)
	}
}

// TestMarkdownCacheBound: rendered HTML is kept by its Markdown's hash, the
// oldest dropped past the bound; what the cache answers is what a render gives.
func TestMarkdownCacheBound(t *testing.T) {
	md := NewMarkdown()
	md.cache.max = 100
	first := md.HTML("**a**")
	if again := md.HTML("**a**"); again != first || first != md.render("**a**") {
		t.Fatalf("cached %q, rendered %q", again, md.render("**a**"))
	}
	for i := range 50 {
		md.HTML(strings.Repeat("x", i+1))
	}
	if md.cache.size > 100 || len(md.cache.m) != len(md.cache.order) {
		t.Errorf("cache holds %d bytes in %d entries (%d in order), bound 100", md.cache.size, len(md.cache.m), len(md.cache.order))
	}
	if _, ok := md.cache.get(sha256.Sum256([]byte("**a**"))); ok {
		t.Errorf("the oldest entry was not dropped")
	}
	if h := md.HTML(strings.Repeat("y", 500)); !strings.Contains(string(h), "yyy") {
		t.Errorf("a render larger than the bound: %q", h)
	}
}
