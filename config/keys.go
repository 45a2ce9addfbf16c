package config

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Keys lists every key the YAML file accepts, as paths: "name",
// "settings", "settings.max_wait_seconds", "providers",
// "providers[].api_key_env" ("[]" marks a list of mappings). It is read off
// the file decoder itself — the decoder is run on probe documents and reports
// the key tables it is given — so a key added to the decoder is listed here
// without further work (docs/CONFIG.md is checked against this list).
// The keys of a provider's env map are free and are not listed.
func Keys() []string {
	var out []string
	seen := map[string]bool{}
	queue := []string{""} // "" = the root: probed with an empty document
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		values := []any{map[string]any{}, []any{map[string]any{}}}
		if p == "" {
			values = values[:1]
		}
		for _, v := range values {
			for _, k := range probeKeys(probeDoc(p, v)) {
				if !seen[k] {
					seen[k] = true
					out = append(out, k)
					if strings.Count(k, ".") < 4 { // bounded: the file nests two levels deep
						queue = append(queue, k)
					}
				}
			}
		}
	}
	return out
}

// probeKeys decodes one probe document and returns the key paths whose
// tables the decoder was given, with list indexes written as "[]". Decoding
// errors are expected (a probe value of the wrong kind) and ignored.
func probeKeys(doc any) []string {
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil
	}
	var offered []string
	d := &fileDecoder{path: "probe", offered: &offered}
	c := Default()
	_ = d.decode(&c, data)
	out := make([]string, 0, len(offered))
	for _, k := range offered {
		out = append(out, listIndex.ReplaceAllString(k, "[]"))
	}
	return out
}

// listIndex is a list index in a decoder path ("providers[0].id").
var listIndex = regexp.MustCompile(`\[\d+\]`)

// probeDoc is the document that puts v at path (as Keys writes paths).
func probeDoc(path string, v any) any {
	if path == "" {
		return v
	}
	segs := strings.Split(path, ".")
	inner := v
	for i := len(segs) - 1; i >= 0; i-- {
		name, list := strings.CutSuffix(segs[i], "[]")
		if list && i < len(segs)-1 {
			inner = []any{inner}
		}
		inner = map[string]any{name: inner}
	}
	return inner
}
