package config

import (
	"path/filepath"
	"strings"
)

// InsideResolved is Inside after resolving symbolic links on both sides
// (R18.3): it returns dir resolved, or an error when dir cannot be resolved
// (it does not exist). A folder that cannot be resolved is compared as given.
func InsideResolved(folders []string, dir string) (string, bool, error) {
	return InsideReal(ResolveFolders(folders), dir)
}

// ResolveFolders resolves the symbolic links of folders (InsideResolved); a
// folder that cannot be resolved stays as given, cleaned; empty ones are left out.
func ResolveFolders(folders []string) []string {
	real := make([]string, 0, len(folders))
	for _, f := range folders {
		if f == "" {
			continue
		}
		if rf, err := filepath.EvalSymlinks(f); err == nil {
			real = append(real, rf)
		} else {
			real = append(real, filepath.Clean(f))
		}
	}
	return real
}

// InsideReal is InsideResolved with the folders resolved already (ResolveFolders).
func InsideReal(real []string, dir string) (string, bool, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false, err
	}
	return resolved, Inside(real, resolved), nil
}

// HasDotDot reports whether a path names a ".." element.
func HasDotDot(p string) bool {
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// Inside reports whether dir equals or lies below one of folders. Both sides
// are compared lexically after filepath.Clean (no symlinks are resolved);
// "/a/bc" is not inside "/a/b". Empty strings never match.
func Inside(folders []string, dir string) bool {
	if dir == "" {
		return false
	}
	d := filepath.Clean(dir)
	for _, f := range folders {
		if f == "" {
			continue
		}
		f = filepath.Clean(f)
		if d == f {
			return true
		}
		prefix := f
		if !strings.HasSuffix(prefix, string(filepath.Separator)) {
			prefix += string(filepath.Separator)
		}
		if strings.HasPrefix(d, prefix) {
			return true
		}
	}
	return false
}
