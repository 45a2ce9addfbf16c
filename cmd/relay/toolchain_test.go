package main

import (
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// readRepoFile reads a file at the repository's root.
func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goVersionParts splits "go1.26.11" (or "1.26.11") into its numbers.
func goVersionParts(t *testing.T, v string) []int {
	t.Helper()
	m := regexp.MustCompile(`^(?:go)?(\d+)\.(\d+)(?:\.(\d+))?$`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("%q is not a Go release (goX.Y.Z)", v)
	}
	var out []int
	for _, s := range m[1:] {
		n, _ := strconv.Atoi(s) // "" (no patch) is 0
		out = append(out, n)
	}
	return out
}

// TestGoToolchainInSync (R18.36): the relay is built with one Go release,
// go.mod's `toolchain` line, the one whose standard library govulncheck
// checks: the Dockerfile's GO_VERSION is the same release and its build stage
// uses it, .ci/run and .ci/vulncheck take GOTOOLCHAIN from go.mod, and
// .ci/vulncheck fails on a called vulnerability of the standard library by
// default. In CI the test binary itself must run on that release (or newer).
func TestGoToolchainInSync(t *testing.T) {
	gomod := readRepoFile(t, "go.mod")
	m := regexp.MustCompile(`(?m)^toolchain\s+(go\S+)\s*$`).FindStringSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no `toolchain goX.Y.Z` line: the standard library's security fixes come with the toolchain")
	}
	toolchain := m[1]
	want := goVersionParts(t, toolchain)
	if len(want) != 3 {
		t.Fatalf("go.mod's toolchain %q names no patch release", toolchain)
	}

	docker := readRepoFile(t, "Dockerfile")
	dm := regexp.MustCompile(`(?m)^ARG\s+GO_VERSION=(\S+)\s*$`).FindStringSubmatch(docker)
	if dm == nil {
		t.Fatal("Dockerfile has no `ARG GO_VERSION=…` line")
	}
	if "go"+dm[1] != toolchain {
		t.Errorf("Dockerfile builds with Go %s, go.mod's toolchain is %s: keep them the same release", dm[1], toolchain)
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+golang:(\S+)`).FindAllStringSubmatch(docker, -1)
	if len(froms) == 0 {
		t.Error("Dockerfile has no `FROM golang:…` build stage")
	}
	for _, f := range froms {
		if !strings.HasPrefix(f[1], "${GO_VERSION}") {
			t.Errorf("Dockerfile: FROM golang:%s does not use ${GO_VERSION}", f[1])
		}
	}

	const fromGoMod = `GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-$(awk '$1 == "toolchain" {print $2}' go.mod)}`
	for _, script := range []string{".ci/run", ".ci/vulncheck"} {
		if !strings.Contains(readRepoFile(t, script), "export "+fromGoMod) {
			t.Errorf("%s does not take GOTOOLCHAIN from go.mod's toolchain line (want: export %s)", script, fromGoMod)
		}
	}
	if vc := readRepoFile(t, ".ci/vulncheck"); !strings.Contains(vc, "VULNCHECK_STDLIB=${VULNCHECK_STDLIB:-fail}") {
		t.Error(".ci/vulncheck does not fail on called standard-library vulnerabilities by default (want VULNCHECK_STDLIB=${VULNCHECK_STDLIB:-fail})")
	}
	if p := readRepoFile(t, ".ci/vulncheck.d/main.go"); !strings.Contains(p, `flag.String("stdlib", "fail"`) {
		t.Error(".ci/vulncheck.d/main.go: -stdlib does not default to fail")
	}

	got := goVersionParts(t, strings.Fields(runtime.Version())[0])
	older := false
	for i := range want {
		if got[i] != want[i] {
			older = got[i] < want[i]
			break
		}
	}
	if older {
		msg := "the tests run on " + runtime.Version() + ", older than go.mod's toolchain " + toolchain + " (GOTOOLCHAIN=local?)"
		if os.Getenv("CI") == "true" {
			t.Error(msg + ": CI must use go.mod's toolchain (.ci/run exports GOTOOLCHAIN from it)")
		} else {
			t.Log(msg)
		}
	}
}
