package store

import (
	"strconv"
	"strings"
)

// luaNames is a script's prelude that names its KEYS or ARGV (table): one
// "local NAME = TABLE[i]" per name, in order, so a script's body reads its
// keys and arguments by name, never by a bare index. The Go side fills the
// same slots by the constants the names are indexed by (an array
// [xN]string{xFoo: "fooKey", …} keeps both in one place).
func luaNames(table string, names []string) string {
	var b strings.Builder
	for i, n := range names {
		if n == "" {
			panic("store: script slot " + strconv.Itoa(i+1) + " of " + table + " has no name")
		}
		b.WriteString("local " + n + " = " + table + "[" + strconv.Itoa(i+1) + "]\n")
	}
	return b.String()
}
