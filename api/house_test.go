package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/oar/relay/domain"
)

// The house's measures of the product code (every Go file outside tests,
// bench/ and relaytest/): what a newcomer can read in one sitting.
const (
	houseMaxLines      = 80  // a function's lines, its signature and braces included
	houseMaxParams     = 6   // a function's parameters, the receiver not counted
	houseMaxComplexity = 30  // a function's cyclomatic complexity
	houseMaxAverage    = 4.0 // the average complexity over all functions
	houseMaxAnyMaps    = 5   // map[string]any in the domain's product code
	houseMaxNameFiles  = 2   // files of domain and api that write an action's name as a literal
)

// houseFunc is one function's measures.
type houseFunc struct {
	where                     string
	lines, params, complexity int
}

// complexity is the cyclomatic complexity as gocyclo counts it: 1, plus one
// for each if, for, range, non-default case and select case, && and ||
// (function literals count toward their function).
func complexity(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if x.List != nil {
				c++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// productFiles are the module's product Go files (relative to its root).
func productFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", p)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bench" || rel == "relaytest" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func houseFuncs(t *testing.T) []houseFunc {
	t.Helper()
	fset := token.NewFileSet()
	var fns []houseFunc
	for _, rel := range productFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join("..", rel), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			params := 0
			for _, p := range fn.Type.Params.List {
				params += max(len(p.Names), 1)
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			fns = append(fns, houseFunc{where: rel + ":" + fn.Name.Name, lines: end.Line - start.Line + 1,
				params: params, complexity: complexity(fn)})
		}
	}
	return fns
}

// TestHouseRules holds the product code to the house's measures: no
// function over 80 lines, 6 parameters or complexity 30, the average
// complexity at most 4.0.
func TestHouseRules(t *testing.T) {
	fns := houseFuncs(t)
	if len(fns) < 1000 {
		t.Fatalf("found %d functions: the walk missed the module", len(fns))
	}
	total := 0
	for _, f := range fns {
		total += f.complexity
		if f.lines > houseMaxLines {
			t.Errorf("%s has %d lines (at most %d): cut it along its seams", f.where, f.lines, houseMaxLines)
		}
		if f.params > houseMaxParams {
			t.Errorf("%s takes %d parameters (at most %d): give it a request struct", f.where, f.params, houseMaxParams)
		}
		if f.complexity > houseMaxComplexity {
			t.Errorf("%s has complexity %d (at most %d)", f.where, f.complexity, houseMaxComplexity)
		}
	}
	if avg := float64(total) / float64(len(fns)); avg > houseMaxAverage {
		t.Errorf("average complexity %.2f over %d functions (at most %.1f)", avg, len(fns), houseMaxAverage)
	}
}

var tagRE = regexp.MustCompile("`[^`]*`")

// TestHouseDomainTyped holds the domain to typed values and the action
// registry: at most 5 map[string]any in its product code, and each action's
// name written as a literal in at most 2 files of domain and api.
func TestHouseDomainTyped(t *testing.T) {
	anyMaps := 0
	named := map[string][]string{}
	names := domain.ActionNames()
	for _, rel := range productFiles(t) {
		dir := filepath.Dir(rel)
		if dir != "domain" && dir != "api" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", rel))
		if err != nil {
			t.Fatal(err)
		}
		// Struct tags (a JSON key named like an action) are no literals.
		src := tagRE.ReplaceAllString(string(b), "``")
		if dir == "domain" {
			anyMaps += strings.Count(src, "map[string]any")
		}
		for _, n := range names {
			if strings.Contains(src, `"`+n+`"`) {
				named[n] = append(named[n], rel)
			}
		}
	}
	if anyMaps > houseMaxAnyMaps {
		t.Errorf("the domain's product code writes map[string]any %d times (at most %d): use a typed struct", anyMaps, houseMaxAnyMaps)
	}
	for _, n := range names {
		// "ask" is also a mode and a question kind; its action literal is
		// the registry's alone, the other files name the mode.
		if n == "ask" {
			continue
		}
		if files := named[n]; len(files) > houseMaxNameFiles {
			t.Errorf("action %q is written as a literal in %d files (at most %d): %v — take it from the registry (domain/actions.go)", n, len(files), houseMaxNameFiles, files)
		}
	}
}
