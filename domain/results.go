package domain

import (
	"encoding/json"
	"time"
)

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

// strPtr is s as a typed result keeps it: nil (null) when empty.
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// jsonFields is a typed result as the fields of a tool's result (its JSON
// keys, each value as encoded).
func jsonFields(x any) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	return m, json.Unmarshal(b, &m)
}
