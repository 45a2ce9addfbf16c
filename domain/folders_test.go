package domain

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The folders rule's own folders are resolved once per folderRecheck (R18.3:
// the session's folder is resolved at every turn start, folderAllowed).
func TestRealFoldersKeptForARecheck(t *testing.T) {
	base := t.TempDir()
	one, two := filepath.Join(base, "one"), filepath.Join(base, "two")
	for _, d := range []string{one, two} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(base, "work")
	if err := os.Symlink(one, link); err != nil {
		t.Fatal(err)
	}
	r := New(nil, nil, nil, Options{Folders: []string{link}})
	if got := r.creates.realFolders(); !slices.Equal(got, []string{one}) {
		t.Fatalf("resolved %v, want %v", got, one)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(two, link); err != nil {
		t.Fatal(err)
	}
	if got := r.creates.realFolders(); !slices.Equal(got, []string{one}) {
		t.Fatalf("resolved again before the recheck: %v", got)
	}
	if _, why := r.folderAllowed(two); why == "" {
		t.Fatal("a folder outside the kept resolution was allowed")
	}
	r.creates.foldKept.mu.Lock()
	r.creates.foldKept.at = time.Now().Add(-folderRecheck)
	r.creates.foldKept.mu.Unlock()
	if got := r.creates.realFolders(); !slices.Equal(got, []string{two}) {
		t.Fatalf("after the recheck: %v, want %v", got, two)
	}
	if _, why := r.folderAllowed(two); why != "" {
		t.Fatalf("the folder the rule now resolves to is refused: %s", why)
	}
}
