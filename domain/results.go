package domain

import "time"

// tsString is ts of a time that is never zero (a record's creation), as the
// string the typed results keep.
func tsString(t time.Time) string { return t.UTC().Format(timeFormat) }

// tsPtr is ts as a typed result keeps it: nil (null) for the zero time.
func tsPtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := tsString(t)
	return &s
}

// strPtr is nilIfEmpty as a typed result keeps it.
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
