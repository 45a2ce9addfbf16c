package relaytest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// builtBinary is one package built once per test binary.
type builtBinary struct {
	once sync.Once
	path string
	err  error
}

var binaries sync.Map // import path → *builtBinary

// buildBinary builds the Go package pkg (an import path of this module) once
// per test binary and returns the executable's path; the tests that run it as
// a real process (relay serve and worker, the fake ACP agent) share it.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	v, _ := binaries.LoadOrStore(pkg, &builtBinary{})
	b := v.(*builtBinary)
	b.once.Do(func() {
		begin := time.Now()
		dir, err := os.MkdirTemp("", "relay-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
			return
		}
		t.Logf("%s built in %s (shared by this test binary's process tests)", pkg, time.Since(begin).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
