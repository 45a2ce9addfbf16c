package config

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// configDoc is the configuration reference this package is checked against.
const configDoc = "../docs/CONFIG.md"

func readConfigDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatalf("read %s: %v", configDoc, err)
	}
	return string(b)
}

// TestKeys checks the list Keys derives from the decoder: it holds keys of
// every level, and every key on it is one the decoder accepts.
func TestKeys(t *testing.T) {
	keys := Keys()
	for _, want := range []string{"name", "providers", "providers[].api_key_env", "providers[].env", "settings.max_turn_seconds",
		"timing.agent_silence", "limits.hops"} {
		if !slices.Contains(keys, want) {
			t.Errorf("Keys() lacks %q; got %v", want, keys)
		}
	}
	for _, k := range keys {
		data, err := yaml.Marshal(probeDoc(k, "x"))
		if err != nil {
			t.Fatal(err)
		}
		c := Default()
		err = (&fileDecoder{path: "f"}).decode(&c, data)
		if err != nil && strings.Contains(err.Error(), "unknown key") {
			t.Errorf("Keys() lists %q, but the decoder refuses it: %v", k, err)
		}
	}
}

// TestConfigDocNamesEveryKey keeps docs/CONFIG.md true: every key the YAML
// decoder accepts is written there as `path` (e.g. `timing.coalesce`,
// `providers[].base_url`), and every flag and its environment variable appear.
func TestConfigDocNamesEveryKey(t *testing.T) {
	doc := readConfigDoc(t)
	var missing []string
	for _, k := range Keys() {
		if !strings.Contains(doc, "`"+k+"`") {
			missing = append(missing, "`"+k+"`")
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s does not document these YAML keys the config decoder accepts (write each as its path in backticks): %s",
			configDoc, strings.Join(missing, ", "))
	}
	missing = nil
	for _, fe := range flagEnv {
		if !strings.Contains(doc, "`--"+fe.flag+"`") {
			missing = append(missing, "`--"+fe.flag+"`")
		}
		if !strings.Contains(doc, "`"+fe.env+"`") {
			missing = append(missing, "`"+fe.env+"`")
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s does not document these flags and environment variables: %s", configDoc, strings.Join(missing, ", "))
	}
}

// TestConfigDocExampleLoads: the example file in docs/CONFIG.md is one the
// relay accepts.
func TestConfigDocExampleLoads(t *testing.T) {
	doc := readConfigDoc(t)
	_, rest, ok := strings.Cut(doc, "```yaml\n")
	if !ok {
		t.Fatalf("%s has no ```yaml example", configDoc)
	}
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("%s: the ```yaml example is not closed", configDoc)
	}
	path := t.TempDir() + "/relay.yaml"
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(map[string]string{"config": path}, nil); err != nil {
		t.Errorf("the example in %s does not load: %v", configDoc, err)
	}
}
