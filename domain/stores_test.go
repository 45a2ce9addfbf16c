package domain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// storeUsers maps each domain file that calls the store to the interface of
// stores.go that names what it may use (recordStore is open to all).
var storeUsers = map[string]string{
	"tool.go": "actionStore", "send.go": "recordStore", "create.go": "createStore", "sessions.go": "actionStore",
	"update.go": "updateStore",
	"tasks.go":  "taskStore", "mcptask.go": "mcpTaskStore", "mcptask_orphan.go": "mcpTaskStore",
	"usage.go": "usageStore", "caps.go": "usageStore",
	"groups.go": "groupStore", "reads.go": "readStore", "tokens.go": "tokenStore",
	"turns.go": "drainStore", "turntoken.go": "drainStore", "drainer.go": "drainStore", "stacks.go": "drainStore",
	"queue.go": "queueStore", "steer.go": "steerStore",
	"pipeline.go": "deliveryStore", "events.go": "deliveryStore",
	"mirrors.go": "mirrorStore", "notify.go": "deliveryStore",
	"subscribe.go": "subscriptionStore",
	"asks.go":      "askStore",
	"cards.go":     "cardStore",
	"schedule.go":  "scheduleStore",
	"peer.go":      "peerStore", "peercheck.go": "peerStore", "peerpoll.go": "peerStore", "peerserve.go": "peerStore",
	"peertokens.go": "peerStore", "pairing.go": "peerStore", "remote.go": "peerStore",
	"owner.go": "ownerStore", "kill.go": "killStore",
	"relay.go": "lifeStore", "jobs.go": "lifeStore",
}

// TestStoreInterfacesNameTheirUse checks stores.go against the code: every
// store operation a file calls is in its subsystem's interface or in
// recordStore, an operation only one subsystem uses is in that one's, and
// no interface names an operation nothing calls. A new store call, or a
// file that starts using another subsystem's operations, fails here until
// stores.go says so.
func TestStoreInterfacesNameTheirUse(t *testing.T) {
	fset := token.NewFileSet()
	declared := map[string]map[string]bool{} // interface → methods
	f, err := parser.ParseFile(fset, "stores.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		it, ok := ts.Type.(*ast.InterfaceType)
		if !ok || ts.Name.Name == "Store" {
			return true
		}
		declared[ts.Name.Name] = map[string]bool{}
		for _, m := range it.Methods.List {
			for _, name := range m.Names {
				declared[ts.Name.Name][name.Name] = true
			}
		}
		return true
	})
	if len(declared) < 2 || len(declared["recordStore"]) == 0 {
		t.Fatalf("stores.go declares %d interfaces; want recordStore and one per subsystem", len(declared))
	}

	users := map[string]map[string]bool{} // method → subsystems calling it
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "stores.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(pf, func(n ast.Node) bool {
			se, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if !storeExpr(se.X, se.Sel.Name, declared) {
				return true
			}
			sub, ok := storeUsers[name]
			if !ok {
				t.Errorf("%s calls the store (%s) but storeUsers names no subsystem for it", fset.Position(se.Pos()), se.Sel.Name)
				return true
			}
			m := se.Sel.Name
			if !declared[sub][m] && !declared["recordStore"][m] {
				t.Errorf("%s: %s uses store.%s, which neither %s nor recordStore names (stores.go)", fset.Position(se.Pos()), name, m, sub)
			}
			if users[m] == nil {
				users[m] = map[string]bool{}
			}
			users[m][sub] = true
			return true
		})
	}
	for iface, ms := range declared {
		for m := range ms {
			us := users[m]
			switch {
			case len(us) == 0:
				t.Errorf("%s names %s, which no domain file calls", iface, m)
			case iface == "recordStore" && len(us) == 1:
				t.Errorf("recordStore names %s, which only %s uses: move it there", m, keys(us)[0])
			case iface != "recordStore" && !us[iface]:
				t.Errorf("%s names %s, which only %v use", iface, m, keys(us))
			}
		}
	}
}

// storeExpr reports whether x.m is a store call: r.st.m, or st.m on a
// parameter st (hub.listen) when m is a method stores.go declares (a
// settings value named st has fields, not those).
func storeExpr(x ast.Expr, m string, declared map[string]map[string]bool) bool {
	switch x := x.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == "st"
	case *ast.Ident:
		if x.Name != "st" {
			return false
		}
		for _, ms := range declared {
			if ms[m] {
				return true
			}
		}
	}
	return false
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return slices.Clip(out)
}
