// Command vulncheck.d/main.go reads govulncheck's JSON stream (-format json)
// on stdin, prints one line per vulnerability and module, and decides the CI
// policy of .ci/vulncheck:
//
//   - a vulnerability that our code calls (a finding whose trace's first
//     frame names a function) fails the run (exit 1), in the standard
//     library ("stdlib") too (R18.36: its fix is a newer Go toolchain, go.mod's
//     toolchain line);
//   - -stdlib=tolerate prints a called standard-library vulnerability and
//     counts it as tolerated instead (a developer on an older local Go);
//   - imported-but-not-called and required-but-not-imported findings are
//     printed for information only.
//
// Exit codes: 0 pass, 1 policy failure, 2 unreadable input.
// Run as: go run .ci/vulncheck.d/main.go [-stdlib=fail|tolerate] < out.json
// (a file argument, not ./.ci/...: dot directories are not importable).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type position struct {
	Filename string `json:"filename"`
	Line     int    `json:"line"`
	Column   int    `json:"column"`
}

type frame struct {
	Module   string    `json:"module"`
	Version  string    `json:"version"`
	Package  string    `json:"package"`
	Function string    `json:"function"`
	Receiver string    `json:"receiver"`
	Position *position `json:"position"`
}

type finding struct {
	OSV          string  `json:"osv"`
	FixedVersion string  `json:"fixed_version"`
	Trace        []frame `json:"trace"`
}

type osvEntry struct {
	ID      string   `json:"id"`
	Summary string   `json:"summary"`
	Aliases []string `json:"aliases"`
}

type config struct {
	ScannerVersion string `json:"scanner_version"`
	DB             string `json:"db"`
	GoVersion      string `json:"go_version"`
	ScanLevel      string `json:"scan_level"`
}

type message struct {
	Config  *config   `json:"config"`
	OSV     *osvEntry `json:"osv"`
	Finding *finding  `json:"finding"`
}

// Levels, weakest first; a (vulnerability, module) pair takes its strongest.
const (
	required = iota
	imported
	called
)

var levelName = [...]string{"required", "imported", "CALLED"}

type key struct{ osv, module string }

type result struct {
	key
	version  string
	fixed    string
	level    int
	packages map[string]bool
	example  []frame // shortest called trace
	nTraces  int
}

func main() {
	stdlibPolicy := flag.String("stdlib", "fail", "what a called stdlib vulnerability does: fail or tolerate")
	flag.Parse()
	if *stdlibPolicy != "tolerate" && *stdlibPolicy != "fail" {
		fmt.Fprintln(os.Stderr, "vulncheck: -stdlib must be tolerate or fail")
		os.Exit(2)
	}

	var cfg config
	osvs := map[string]*osvEntry{}
	results := map[key]*result{}
	nFindings := 0
	dec := json.NewDecoder(os.Stdin)
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			fmt.Fprintf(os.Stderr, "vulncheck: reading govulncheck JSON: %v\n", err)
			os.Exit(2)
		}
		switch {
		case m.Config != nil:
			cfg = *m.Config
		case m.OSV != nil:
			osvs[m.OSV.ID] = m.OSV
		case m.Finding != nil && len(m.Finding.Trace) > 0:
			nFindings++
			f := m.Finding
			top := f.Trace[0]
			k := key{f.OSV, top.Module}
			r := results[k]
			if r == nil {
				r = &result{key: k, packages: map[string]bool{}}
				results[k] = r
			}
			r.version, r.fixed = top.Version, f.FixedVersion
			lvl := required
			if top.Function != "" {
				lvl = called
			} else if top.Package != "" {
				lvl = imported
			}
			if lvl > r.level {
				r.level = lvl
			}
			if top.Package != "" {
				r.packages[top.Package] = true
			}
			if lvl == called {
				r.nTraces++
				if r.example == nil || len(f.Trace) < len(r.example) {
					r.example = f.Trace
				}
			}
		}
	}
	if cfg.ScannerVersion == "" {
		fmt.Fprintln(os.Stderr, "vulncheck: no config message in the input: is it govulncheck -format json output?")
		os.Exit(2)
	}

	list := make([]*result, 0, len(results))
	for _, r := range results {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.level != b.level {
			return a.level > b.level
		}
		if (a.module == "stdlib") != (b.module == "stdlib") {
			return a.module != "stdlib"
		}
		if a.module != b.module {
			return a.module < b.module
		}
		return a.osv < b.osv
	})

	fmt.Printf("govulncheck %s, %s, scan level %s, db %s: %d findings\n",
		cfg.ScannerVersion, cfg.GoVersion, cfg.ScanLevel, cfg.DB, nFindings)
	if cfg.ScanLevel != "" && cfg.ScanLevel != "symbol" {
		fmt.Println("WARNING: scan level is not symbol: 'called' cannot be told apart")
	}

	var failing, tolerated, info []*result
	stdlibFix := ""
	for _, r := range list {
		switch {
		case r.level == called && r.module == "stdlib":
			if *stdlibPolicy == "fail" {
				failing = append(failing, r)
			} else {
				tolerated = append(tolerated, r)
			}
			if semverLess(stdlibFix, r.fixed) {
				stdlibFix = r.fixed
			}
		case r.level == called:
			failing = append(failing, r)
		default:
			info = append(info, r)
		}
	}

	show := func(title string, rs []*result, traces bool) {
		if len(rs) == 0 {
			return
		}
		fmt.Printf("\n%s (%d):\n", title, len(rs))
		for _, r := range rs {
			e := osvs[r.osv]
			summary, aliases := "", ""
			if e != nil {
				summary = e.Summary
				if len(e.Aliases) > 0 {
					aliases = " [" + strings.Join(e.Aliases, ", ") + "]"
				}
			}
			fixed := r.fixed
			if fixed == "" {
				fixed = "no fix yet"
			} else if r.module == "stdlib" {
				fixed = "go" + strings.TrimPrefix(fixed, "v")
			}
			found := r.version
			if r.module == "stdlib" {
				found = "go" + strings.TrimPrefix(found, "v")
			}
			pkgs := make([]string, 0, len(r.packages))
			for p := range r.packages {
				pkgs = append(pkgs, p)
			}
			sort.Strings(pkgs)
			where := r.module + "@" + found
			if len(pkgs) > 0 {
				where += " (" + strings.Join(pkgs, ", ") + ")"
			}
			fmt.Printf("  %-8s %s  %s  fixed in %s\n", levelName[r.level], r.osv, where, fixed)
			fmt.Printf("           %s%s\n", summary, aliases)
			if traces && r.example != nil {
				fmt.Printf("           e.g. %s  (%d traces; https://pkg.go.dev/vuln/%s)\n", traceString(r.example), r.nTraces, r.osv)
			}
		}
	}
	failTitle := "FAIL: called vulnerabilities outside the standard library"
	if *stdlibPolicy == "fail" {
		failTitle = "FAIL: called vulnerabilities (standard library included: -stdlib=fail)"
	}
	show(failTitle, failing, true)
	show("TOLERATED: called vulnerabilities in the standard library", tolerated, true)
	show("info: vulnerable code imported or required but not called (not failing)", info, false)

	fmt.Println()
	if len(tolerated) > 0 {
		fmt.Printf("vulncheck: tolerated %d called standard-library vulnerabilities of %s: they are fixed only by a newer Go toolchain (%s fixes all of them), not by go.mod's require lines; set go.mod's toolchain line (and GOTOOLCHAIN) to move, or run with VULNCHECK_STDLIB=fail to make them fail\n",
			len(tolerated), cfg.GoVersion, "go"+strings.TrimPrefix(stdlibFix, "v"))
	}
	if len(failing) > 0 {
		mods := map[string]string{}
		noFix := map[string]bool{}
		for _, r := range failing {
			if r.fixed == "" {
				noFix[r.module] = true
			}
			if semverLess(mods[r.module], r.fixed) {
				mods[r.module] = r.fixed
			}
		}
		var ups []string
		for m, v := range mods {
			switch {
			case m == "stdlib":
				ups = append(ups, "Go toolchain go"+strings.TrimPrefix(v, "v"))
			case v == "":
				ups = append(ups, m+" (no fixed version)")
			default:
				ups = append(ups, m+"@"+v)
			}
			if noFix[m] && v != "" {
				ups = append(ups, m+" (some with no fixed version)")
			}
		}
		sort.Strings(ups)
		fmt.Printf("vulncheck: FAIL: %d called vulnerabilities (counted per module); upgrade: %s\n",
			len(failing), strings.Join(ups, ", "))
		os.Exit(1)
	}
	if *stdlibPolicy == "fail" {
		fmt.Printf("vulncheck: ok: 0 called vulnerabilities, standard library included (%d not called)\n", len(info))
		return
	}
	fmt.Printf("vulncheck: ok: 0 called vulnerabilities outside the standard library (%d tolerated in stdlib, %d not called)\n",
		len(tolerated), len(info))
}

// traceString renders a trace from our code to the vulnerable symbol.
func traceString(tr []frame) string {
	parts := make([]string, 0, len(tr))
	for i := len(tr) - 1; i >= 0; i-- {
		f := tr[i]
		name := f.Function
		if f.Receiver != "" {
			name = strings.TrimPrefix(f.Receiver, "*") + "." + name
		}
		pkg := f.Package
		if j := strings.LastIndex(pkg, "/"); j >= 0 {
			pkg = pkg[j+1:]
		}
		s := pkg + "." + name
		if i == len(tr)-1 && f.Position != nil {
			s = fmt.Sprintf("%s:%d: %s", f.Position.Filename, f.Position.Line, s)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " -> ")
}

// semverLess reports a < b for "vX.Y.Z[-pre]" strings, comparing the numeric
// release part only; "" is less than anything.
func semverLess(a, b string) bool {
	if a == "" || b == "" {
		return a == "" && b != ""
	}
	pa, pb := nums(a), nums(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	if len(pa) != len(pb) {
		return len(pa) < len(pb)
	}
	return a < b
}

func nums(v string) []int {
	v = strings.TrimPrefix(strings.TrimPrefix(v, "v"), "go")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	var out []int
	for _, p := range strings.Split(v, ".") {
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out
}
