package domain

import "time"

// tsString is ts of a time that is never zero (a record's creation), as the
// string the typed results keep.
func tsString(t time.Time) string { return t.UTC().Format(timeFormat) }
