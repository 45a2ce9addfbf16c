package domain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestClosedCodesHoldEveryCode: closedCodes (metric labels, a paired relay's
// codes, R18.32) is written out apart from the constants; every Code*
// constant of errors.go must be in it (REMOTE_RELAY_UNAVAILABLE, R25.3, was
// once left out and became INTERNAL in labels and peer answers).
func TestClosedCodesHoldEveryCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(v.Values) {
					continue
				}
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				code, _ := strconv.Unquote(lit.Value)
				n++
				if !KnownCode(code) {
					t.Errorf("%s = %s is not in closedCodes", name.Name, code)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("found %d Code constants in errors.go: the parse is wrong", n)
	}
}
