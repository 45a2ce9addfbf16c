package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oar/relay/domain"
	"github.com/oar/relay/metrics"
)

// The references in docs/ are checked against the code here, where the
// router, the tool schema and the domain are all in reach.
const (
	apiDoc  = "../docs/API.md"
	toolDoc = "../docs/TOOL.md"
)

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// headingNames returns the `names` written in backticks in the doc's headings.
func headingNames(doc string) map[string]bool {
	names := map[string]bool{}
	tick := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		for _, m := range tick.FindAllStringSubmatch(line, -1) {
			names[m[1]] = true
		}
	}
	return names
}

// TestToolDocNamesEveryAction keeps docs/TOOL.md true: every action of the
// relay_tool schema's enum, and every action the domain knows, has a heading
// (### `action`), and every argument of the schema is written in backticks.
func TestToolDocNamesEveryAction(t *testing.T) {
	doc := readDoc(t, toolDoc)
	heads := headingNames(doc)
	schema := relayToolInputSchema()
	props := schema["properties"].(map[string]any)
	enum := props["action"].(map[string]any)["enum"].([]string)
	var missing []string
	for _, a := range enum {
		if !heads[a] {
			missing = append(missing, a)
		}
	}
	for _, a := range domain.Actions() {
		if !heads[a] && !slices.Contains(missing, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s has no heading for these relay_tool actions (add a heading such as \"### `%s`\"): %s",
			toolDoc, missing[0], strings.Join(missing, ", "))
	}
	missing = nil
	for name := range props {
		if !strings.Contains(doc, "`"+name+"`") {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("%s does not mention these arguments of the relay_tool schema (in backticks): %s", toolDoc, strings.Join(missing, ", "))
	}
}

// TestToolDocNamesEveryErrorCode: every Code… constant of domain/errors.go
// appears in docs/TOOL.md.
func TestToolDocNamesEveryErrorCode(t *testing.T) {
	doc := readDoc(t, toolDoc)
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "domain", "errors.go"), nil, 0)
	if err != nil {
		t.Fatalf("parse domain/errors.go: %v", err)
	}
	var codes, missing []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				code, _ := strconv.Unquote(lit.Value)
				codes = append(codes, code)
				if !strings.Contains(doc, "`"+code+"`") {
					missing = append(missing, code)
				}
			}
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d error codes in domain/errors.go; has the file changed shape?", len(codes))
	}
	if len(missing) > 0 {
		t.Errorf("%s does not document these error codes of domain/errors.go: %s", toolDoc, strings.Join(missing, ", "))
	}
}

// ginPath writes a gin route path as the docs do: ":id" → "{id}", "*file" → "{file}".
func ginPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// TestAPIDocNamesEveryRoute keeps docs/API.md true: every route the relay's
// gin router registers is written there as "METHOD /path" (a route registered
// for every method may be written "ANY /path").
func TestAPIDocNamesEveryRoute(t *testing.T) {
	doc := readDoc(t, apiDoc)
	h := NewRouter(Options{OwnerToken: "docs-test-owner-token", Metrics: metrics.New()})
	rt, ok := h.(*router)
	if !ok {
		t.Fatalf("NewRouter returned %T, not *router; update this test", h)
	}
	var missing []string
	for _, r := range rt.Routes() {
		p := ginPath(r.Path)
		if strings.Contains(doc, r.Method+" "+p) || strings.Contains(doc, "ANY "+p) {
			continue
		}
		missing = append(missing, r.Method+" "+p)
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	if len(missing) > 0 {
		t.Errorf("%s does not document these routes of the router (write each as \"METHOD /path\", path parameters as {name}):\n  %s",
			apiDoc, strings.Join(missing, "\n  "))
	}
}

// TestDocsStandAlone: README.md and docs/ are this repository's own
// reference; they point to no file outside it.
func TestDocsStandAlone(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	outside := regexp.MustCompile(`\]\(\.\./|\.\./shared|shared/SPEC|SPEC(\.md| §)`)
	// The four references are read by people without the specification:
	// no requirement numbers (R7.8) and no "seed" page there either.
	reference := regexp.MustCompile(`\bR\d+\.\d+|(?i)\bthe seed\b|\bseed's\b`)
	for _, f := range files {
		ref := slices.Contains([]string{"API.md", "TOOL.md", "CONFIG.md", "OPERATIONS.md"}, filepath.Base(f))
		for i, line := range strings.Split(readDoc(t, f), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d points outside the repository (%q): the docs must stand alone", f, i+1, m)
			}
			if m := reference.FindString(line); ref && m != "" {
				t.Errorf("%s:%d refers to the specification (%q): say what the rule is instead", f, i+1, m)
			}
		}
	}
}
