package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
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

// TestDocsStandAlone: README.md, HACKING.md and docs/ are this repository's
// own reference; they point to no file outside it. docs/REQUIREMENTS.md is
// the one page that says what the requirement numbers mean: the four
// references (API, TOOL, CONFIG, OPERATIONS) carry none, and every other page
// may cite only numbers REQUIREMENTS.md indexes.
func TestDocsStandAlone(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"), filepath.Join("..", "HACKING.md"))
	outside := regexp.MustCompile(`\]\(\.\./|\.\./shared|shared/SPEC|SPEC(\.md| §)`)
	// The four references are read by people without the specification:
	// no requirement numbers (R7.8) and no "seed" page there either.
	reference := regexp.MustCompile(`\bR\d+\.\d+|(?i)\bthe seed\b|\bseed's\b`)
	index := requirementsIndex(t)
	for _, f := range files {
		base := filepath.Base(f)
		ref := slices.Contains([]string{"API.md", "TOOL.md", "CONFIG.md", "OPERATIONS.md"}, base)
		for i, line := range strings.Split(readDoc(t, f), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d points outside the repository (%q): the docs must stand alone", f, i+1, m)
			}
			if m := reference.FindString(line); ref && m != "" {
				t.Errorf("%s:%d refers to the specification (%q): say what the rule is instead", f, i+1, m)
			}
			if base == "REQUIREMENTS.md" {
				continue
			}
			for _, n := range ruleCites(line) {
				if !index.has(n) {
					t.Errorf("%s:%d cites %s, which %s does not index", f, i+1, n, requirementsDoc)
				}
			}
		}
	}
}

const requirementsDoc = "../docs/REQUIREMENTS.md"

// A cited requirement: "R" and a number with its dotted parts and an
// optional letter (R7.11, R5.2.3, R3.4a), optionally the end of a range
// after an en dash, em dash or hyphen (R3.1–R3.4, R17.1-R17.5, R8.4–8.9);
// or "§" and a section. The character before "R" is no letter, digit or _.
var (
	ruleCite    = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])R(\d+(?:\.\d+)*[a-z]?)(?:\s*[–—-]\s*R?(\d+(?:\.\d+)*[a-z]?))?`)
	sectionCite = regexp.MustCompile(`§ ?(\d+)`)
)

// ruleCites returns the requirement numbers text cites, "R"-prefixed, a
// section as "R8". A range whose two ends share everything up to their last
// number (R3.1–R3.4) stands for each number between them (R3.1, R3.2, R3.3,
// R3.4); any other range (R7.8–R9) for its two ends.
func ruleCites(text string) []string {
	var out []string
	for _, m := range ruleCite.FindAllStringSubmatch(text, -1) {
		out = append(out, expandRange(m[1], m[2])...)
	}
	for _, m := range sectionCite.FindAllStringSubmatch(text, -1) {
		out = append(out, "R"+m[1])
	}
	return out
}

func expandRange(from, to string) []string {
	if to == "" {
		return []string{"R" + from}
	}
	fi, ti := strings.LastIndex(from, "."), strings.LastIndex(to, ".")
	if fi >= 0 && ti >= 0 && from[:fi] == to[:ti] {
		a, errA := strconv.Atoi(from[fi+1:])
		b, errB := strconv.Atoi(to[ti+1:])
		if errA == nil && errB == nil && a <= b && b-a <= 50 {
			var out []string
			for n := a; n <= b; n++ {
				out = append(out, "R"+from[:fi+1]+strconv.Itoa(n))
			}
			return out
		}
	}
	return []string{"R" + from, "R" + to}
}

// reqIndex is what docs/REQUIREMENTS.md indexes: its table rows' first
// cells ("| R7.11 |") and its sections' headings ("## 7. Actions" indexes R7
// and §7).
type reqIndex struct{ rules, sections map[string]bool }

func (x reqIndex) has(n string) bool {
	if x.rules[n] {
		return true
	}
	return !strings.Contains(n, ".") && x.sections[n]
}

func requirementsIndex(t *testing.T) reqIndex {
	t.Helper()
	doc := readDoc(t, requirementsDoc)
	x := reqIndex{rules: map[string]bool{}, sections: map[string]bool{}}
	for _, m := range regexp.MustCompile(`(?m)^\| (R\d+(?:\.\d+)*[a-z]?) \|`).FindAllStringSubmatch(doc, -1) {
		x.rules[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^## (\d+)\. `).FindAllStringSubmatch(doc, -1) {
		x.sections["R"+m[1]] = true
	}
	if len(x.rules) < 100 || len(x.sections) < 20 {
		t.Fatalf("%s indexes only %d rules in %d sections; has its shape changed? (rows \"| R7.11 | … |\", headings \"## 7. …\")",
			requirementsDoc, len(x.rules), len(x.sections))
	}
	return x
}

// TestRequirementsIndexed keeps docs/REQUIREMENTS.md complete: every
// requirement number a Go file of the module cites (tests included; a
// range's members, a section by itself) has its line there.
func TestRequirementsIndexed(t *testing.T) {
	index := requirementsIndex(t)
	missing := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range ruleCites(string(b)) {
			if !index.has(n) && !slices.Contains(missing[n], path) {
				missing[n] = append(missing[n], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for n, files := range missing {
		lines = append(lines, n+" (cited in "+strings.Join(files, ", ")+")")
	}
	slices.Sort(lines)
	if len(lines) > 0 {
		t.Errorf("%s has no line for these requirement numbers the code cites (add a row \"| R… | what it says | where |\" under its section):\n  %s",
			requirementsDoc, strings.Join(lines, "\n  "))
	}
}

const architectureDoc = "../docs/ARCHITECTURE.md"

// architectureImports reads docs/ARCHITECTURE.md's package table: for each
// row, its folder (the first backticked name of the first cell; "." is the
// module's root) and the module's own packages its imports column names in
// backticks ("relay" is the root package). Outside modules are written
// without backticks and are not read.
func architectureImports(t *testing.T, module string) map[string][]string {
	t.Helper()
	doc := readDoc(t, architectureDoc)
	start := strings.Index(doc, "\n| folder | owns | imports |")
	if start < 0 {
		t.Fatalf("%s has no package table (header \"| folder | owns | imports |\")", architectureDoc)
	}
	tick := regexp.MustCompile("`([^`]+)`")
	path := func(name string) string {
		if name == "." || name == "relay" {
			return module
		}
		return module + "/" + name
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(doc[start+1:], "\n")[2:] {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		first := tick.FindStringSubmatch(strings.SplitN(line, " | ", 2)[0])
		body := strings.TrimSuffix(strings.TrimSpace(line), "|")
		imports := body[strings.LastIndex(body, "|")+1:]
		if first == nil {
			t.Fatalf("%s: a package row without a `folder`: %.60s", architectureDoc, line)
		}
		var deps []string
		for _, m := range tick.FindAllStringSubmatch(imports, -1) {
			deps = append(deps, path(m[1]))
		}
		slices.Sort(deps)
		rows[path(first[1])] = slices.Compact(deps)
	}
	return rows
}

// TestArchitectureImports keeps docs/ARCHITECTURE.md's package table honest:
// it has a row for every package of the module, no row for a package that is
// gone, and each row's imports column names exactly the module's own packages
// that package imports directly (go list's Imports: its non-test files).
func TestArchitectureImports(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	cmd := exec.Command(goCmd, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	module := "github.com/oar/relay"
	listed := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		var own []string
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				own = append(own, imp)
			}
		}
		slices.Sort(own)
		listed[f[0]] = own
	}
	doc := architectureImports(t, module)
	short := func(ps []string) string {
		var s []string
		for _, p := range ps {
			if p == module {
				s = append(s, "relay")
				continue
			}
			s = append(s, strings.TrimPrefix(p, module+"/"))
		}
		if len(s) == 0 {
			return "—"
		}
		return strings.Join(s, ", ")
	}
	for pkg, imps := range listed {
		row, ok := doc[pkg]
		switch {
		case !ok:
			t.Errorf("%s has no row for package %s (it imports %s)", architectureDoc, pkg, short(imps))
		case !slices.Equal(row, imps):
			t.Errorf("%s: the imports of %s are written as %s; go list says %s", architectureDoc, short([]string{pkg}), short(row), short(imps))
		}
	}
	for pkg := range doc {
		if _, ok := listed[pkg]; !ok {
			t.Errorf("%s has a row for %s, which go list does not know", architectureDoc, pkg)
		}
	}
}

// TestReadmeLinksResolve: README.md points a newcomer to HACKING.md and
// docs/REQUIREMENTS.md, and every relative link in README.md, HACKING.md and
// docs/*.md names a file of the repository.
func TestReadmeLinksResolve(t *testing.T) {
	readme := readDoc(t, filepath.Join("..", "README.md"))
	for _, want := range []string{"(HACKING.md)", "(docs/REQUIREMENTS.md)"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md has no link %s", want)
		}
	}
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"), filepath.Join("..", "HACKING.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		for i, line := range strings.Split(readDoc(t, f), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
					t.Errorf("%s:%d links to %s, which is not in the repository", f, i+1, m[1])
				}
			}
		}
	}
}
