package config

import (
	"strings"
	"testing"
)

// R7.8: monthly_cap (an integer or a decimal number) and cap_unit are read
// from the YAML file and checked.
func TestMonthlyCapYAML(t *testing.T) {
	c := Default()
	err := (&fileDecoder{path: "f"}).decode(&c, []byte(`providers:
  - id: claude-api
    type: claude-code
    monthly_cap: 49.5
    cap_unit: usd
  - id: local
    type: exec
    command: [agent]
    monthly_cap: 2000000
    cap_unit: tokens
`))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Providers[0]; p.MonthlyCap != 49.5 || p.CapUnit != CapUSD {
		t.Errorf("claude-api cap %v %q", p.MonthlyCap, p.CapUnit)
	}
	if p := c.Providers[1]; p.MonthlyCap != 2000000 || p.CapUnit != CapTokens {
		t.Errorf("local cap %v %q", p.MonthlyCap, p.CapUnit)
	}
	c = Default()
	err = (&fileDecoder{path: "f"}).decode(&c, []byte("providers:\n  - id: x\n    type: exec\n    command: [a]\n    monthly_cap: lots\n"))
	if err == nil || !strings.Contains(err.Error(), "monthly_cap") || !strings.Contains(err.Error(), "a number") {
		t.Errorf("monthly_cap: lots: %v", err)
	}
}
