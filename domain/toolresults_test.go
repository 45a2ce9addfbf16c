package domain

import "encoding/json"

// set gives a result field k the value v, as a paired relay's answer would
// (tests that build results by hand).
func (r *result) set(k string, v any) *result {
	if r.raw == nil {
		r.raw = map[string]json.RawMessage{}
	}
	r.raw[k] = mustJSON(v)
	return r
}
