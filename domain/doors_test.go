package domain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// isDoor tells a door: a Relay method whose body is one call of a method of
// one of its subsystems (r.link.Pair(…)), returned or not. r.st is the
// store, not a subsystem.
func isDoor(fn *ast.FuncDecl) bool {
	if fn.Recv == nil || len(fn.Recv.List) != 1 || len(fn.Recv.List[0].Names) != 1 || fn.Body == nil || len(fn.Body.List) != 1 {
		return false
	}
	star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	if id, ok := star.X.(*ast.Ident); !ok || id.Name != "Relay" {
		return false
	}
	var x ast.Expr
	switch s := fn.Body.List[0].(type) {
	case *ast.ReturnStmt:
		if len(s.Results) != 1 {
			return false
		}
		x = s.Results[0]
	case *ast.ExprStmt:
		x = s.X
	}
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	method, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	field, ok := method.X.(*ast.SelectorExpr)
	if !ok || field.Sel.Name == "st" {
		return false
	}
	recv, ok := field.X.(*ast.Ident)
	return ok && recv.Name == fn.Recv.List[0].Names[0].Name
}

// TestDoorsInOneFile: every door of Relay is in doors.go (issue 37 step 2),
// and doors.go holds nothing else.
func TestDoorsInOneFile(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	doors := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			switch door := isDoor(fn); {
			case door && name != "doors.go":
				t.Errorf("%s: Relay.%s is a door: it belongs in doors.go", name, fn.Name.Name)
			case !door && name == "doors.go":
				t.Errorf("doors.go: %s is no door (one call of a subsystem's method)", fn.Name.Name)
			case door:
				doors++
			}
		}
	}
	if doors == 0 {
		t.Error("found no door in doors.go")
	}
}
