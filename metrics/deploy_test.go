package metrics_test

// Keeps deploy/ true to the code: every metric and label used by the Grafana
// dashboard, the Prometheus alerting rules (and their promtool unit tests) is
// one the relay's registry really exports, as built by app.New for `relay
// serve` and `relay worker`.

import (
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/oar/relay/app"
	"github.com/oar/relay/config"
)

const (
	dashboardFile = "../deploy/grafana/relay-dashboard.json"
	rulesFile     = "../deploy/prometheus/relay-alerts.yml"
	ruleTestsFile = "../deploy/prometheus/relay-alerts.test.yml"
	scrapeFile    = "../deploy/prometheus/prometheus.yml"
)

// series is one name a PromQL selector can use, with its labels and type.
type series struct {
	labels map[string]bool
	typ    string // counter, gauge, histogram_bucket, histogram_sum, histogram_count, summary, ...
}

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"job", "instance"}

// exported gathers the registry of a real relay process (embedded Redis) after
// one observation of each vector, and returns every series name a query can
// select: histograms as _bucket (with le), _sum and _count; `up` as Prometheus
// adds it.
func exported(t *testing.T) map[string]series {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir() // the embedded store's data directory
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	m := a.Metrics()
	m.ToolCall("send", "ok", time.Millisecond)
	m.TurnStarted("scripted")
	m.TurnFinished("scripted", "done", time.Second)
	m.CardDecided("asked")
	m.Event("turn_done")
	m.Delivery("message")
	m.HTTPRequest("api", 200)
	m.PeerRequest("events", "ok")
	m.WebhookResult("delivered")

	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]series{}
	add := func(name, typ string, labels map[string]bool, extra ...string) {
		l := map[string]bool{}
		for k := range labels {
			l[k] = true
		}
		for _, k := range append(extra, targetLabels...) {
			l[k] = true
		}
		out[name] = series{labels: l, typ: typ}
	}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		name := mf.GetName()
		// The type's name, not client_model's constants: client_model stays an
		// indirect dependency.
		switch mf.GetType().String() {
		case "HISTOGRAM":
			add(name+"_bucket", "histogram_bucket", labels, "le")
			add(name+"_sum", "histogram_sum", labels)
			add(name+"_count", "histogram_count", labels)
		case "SUMMARY":
			add(name, "summary", labels, "quantile")
			add(name+"_sum", "summary_sum", labels)
			add(name+"_count", "summary_count", labels)
		case "COUNTER":
			add(name, "counter", labels)
		case "GAUGE":
			add(name, "gauge", labels)
		default:
			add(name, strings.ToLower(mf.GetType().String()), labels)
		}
	}
	add("up", "gauge", nil)
	return out
}

// TestDeployRegistryComplete guards exported: every relay_ metric defined in
// the code (metrics.go, AddGauge calls anywhere) must be in the gathered set,
// so a new vector the test does not observe cannot hide a wrong query.
func TestDeployRegistryComplete(t *testing.T) {
	have := exported(t)
	defined := map[string]string{}
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(relay_[a-z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		defined[m[1]] = "metrics/metrics.go"
	}
	gauge := regexp.MustCompile(`AddGauge\(\s*"(relay_[a-z0-9_]+)"`)
	err = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "testdata" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range gauge.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 10 {
		t.Fatalf("found only %d metric definitions in the source: %v", len(defined), defined)
	}
	for name, where := range defined {
		_, plain := have[name]
		_, hist := have[name+"_bucket"]
		if !plain && !hist {
			t.Errorf("%s (defined in %s) is not in the gathered registry: observe it in exported()", name, where)
		}
	}
}

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

func TestDeployDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Inputs []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		SchemaVersion int    `json:"schemaVersion"`
		UID           string `json:"uid"`
		Title         string `json:"title"`
		Panels        []panel
		Templating    struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Datasource json.RawMessage `json:"datasource"`
				Definition string          `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion < 36 || d.UID == "" || d.Title == "" {
		t.Errorf("dashboard: schemaVersion %d (want >= 36), uid %q, title %q", d.SchemaVersion, d.UID, d.Title)
	}
	hasInput := false
	for _, in := range d.Inputs {
		if in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus" {
			hasInput = true
		}
	}
	if !hasInput {
		t.Errorf("dashboard: no __inputs entry DS_PROMETHEUS (datasource, prometheus)")
	}

	have := exported(t)
	var qs []query
	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" || p.Type == "text" {
				continue
			}
			if !strings.Contains(string(p.Datasource), "${DS_PROMETHEUS}") {
				t.Errorf("panel %q: datasource %s is not ${DS_PROMETHEUS}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no targets", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
					continue
				}
				qs = append(qs, query{"panel " + p.Title, tg.Expr})
			}
		}
	}
	walk(d.Panels)
	if len(qs) < 20 {
		t.Errorf("dashboard: only %d queries found", len(qs))
	}
	// Template variables: label_values(metric, label).
	lv := regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := lv.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		qs = append(qs, query{"variable " + v.Name, m[1]})
		for _, name := range metricNames(m[1]) {
			if s, ok := have[name]; ok && !s.labels[m[2]] {
				t.Errorf("variable %s: %s has no label %q", v.Name, name, m[2])
			}
		}
	}
	for _, q := range qs {
		checkQuery(t, have, q)
	}
	promtoolParse(t, qs)
}

// promtoolParse checks the PromQL syntax of the dashboard's queries with
// promtool (Grafana's variables replaced), as recording rules of a scratch
// rules file. Without promtool it skips (fails under CI=true: .ci/run
// installs it before go test).
func promtoolParse(t *testing.T, qs []query) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Errorf("promtool not on PATH under CI=true: the dashboard's PromQL syntax is not checked")
		} else {
			t.Log("promtool not on PATH: the dashboard's PromQL syntax is not checked (apt-get install prometheus)")
		}
		return
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${job}", "relay", "$job", "relay")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range qs {
		rules = append(rules, rule{Record: "dashboard:query" + strconv.Itoa(i), Expr: vars.Replace(q.expr)})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", f).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestDeployAlertRules(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	have := exported(t)
	alerts := map[string]bool{}
	jobs := scrapeJobs(t)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if r.Alert == "" {
				t.Errorf("group %s: rule %q is not an alert", g.Name, name)
			}
			if alerts[name] {
				t.Errorf("alert %s defined twice", name)
			}
			alerts[name] = true
			if r.For == "" {
				t.Errorf("alert %s: no for:", name)
			} else if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for %q: %v", name, r.For, err)
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("alert %s: severity %q (want critical, warning or info)", name, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: summary and description annotations are required", name)
			}
			checkQuery(t, have, query{"alert " + name, r.Expr})
			checkJobs(t, "alert "+name, r.Expr, jobs)
		}
	}
	if len(alerts) < 5 {
		t.Fatalf("%s: only %d alerts", rulesFile, len(alerts))
	}

	// The promtool unit tests (run by .ci/run): their input series use real
	// names and labels, and every alert has at least one.
	b, err = os.ReadFile(ruleTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatalf("%s: %v", ruleTestsFile, err)
	}
	if len(tf.RuleFiles) != 1 || tf.RuleFiles[0] != filepath.Base(rulesFile) {
		t.Errorf("%s: rule_files %v, want [%s]", ruleTestsFile, tf.RuleFiles, filepath.Base(rulesFile))
	}
	tested := map[string]bool{}
	for i, tc := range tf.Tests {
		for _, s := range tc.InputSeries {
			checkQuery(t, have, query{"rule test " + strconv.Itoa(i), s.Series})
		}
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("rule test %d: alert %q is not defined in %s", i, a.Alertname, rulesFile)
			}
			tested[a.Alertname] = true
		}
	}
	var untested []string
	for a := range alerts {
		if !tested[a] {
			untested = append(untested, a)
		}
	}
	sort.Strings(untested)
	if len(untested) > 0 {
		t.Errorf("alerts without a promtool unit test in %s: %v", ruleTestsFile, untested)
	}
}

// scrapeJobs returns the job names of the example scrape config.
func scrapeJobs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(scrapeFile)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName     string `yaml:"job_name"`
			MetricsPath string `yaml:"metrics_path"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", scrapeFile, err)
	}
	var jobs []string
	for _, sc := range c.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("%s: job %s scrapes %s; the relay serves /metrics", scrapeFile, sc.JobName, sc.MetricsPath)
		}
		jobs = append(jobs, sc.JobName)
	}
	if len(jobs) < 2 || len(c.RuleFiles) == 0 || c.RuleFiles[0] != filepath.Base(rulesFile) {
		t.Errorf("%s: want a serve and a worker job and rule_files [%s]; got jobs %v, rule_files %v",
			scrapeFile, filepath.Base(rulesFile), jobs, c.RuleFiles)
	}
	return jobs
}

// checkJobs: every job matcher of an alert selects at least one job of the
// example scrape config, so the rules and the config agree.
func checkJobs(t *testing.T, where, expr string, jobs []string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`\bjob\s*(=~|=)\s*"([^"]*)"`).FindAllStringSubmatch(expr, -1) {
		pat := regexp.QuoteMeta(m[2])
		if m[1] == "=~" {
			pat = m[2]
		}
		re, err := regexp.Compile("^(?:" + pat + ")$")
		if err != nil {
			t.Errorf("%s: job matcher %q: %v", where, m[0], err)
			continue
		}
		ok := false
		for _, j := range jobs {
			ok = ok || re.MatchString(j)
		}
		if !ok {
			t.Errorf("%s: job matcher %q selects no job of %s (%v)", where, m[0], scrapeFile, jobs)
		}
	}
}

var (
	stringLit = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	// A metric name the relay's registry could export: relay_*, the Go and
	// process collectors' go_* and process_*, and Prometheus's up. An
	// identifier after $ (a Grafana variable) or a letter is not one.
	metricRe  = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:$.])((?:relay|go|process)_[A-Za-z0-9_:]*|up)\b(\s*\{[^}]*\})?`)
	matcherRe = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupRe   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	aggRe     = regexp.MustCompile(`\b(sum|avg|min|max|count|group|stddev|stdvar|topk|bottomk|quantile|count_values)\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\(`)
	funcRe    = regexp.MustCompile(`\b(rate|irate|increase|delta|deriv|histogram_quantile)\s*\(`)
)

// metricNames lists the metric names selected in expr.
func metricNames(expr string) []string {
	var out []string
	for _, m := range metricRe.FindAllStringSubmatch(stringLit.ReplaceAllString(expr, `""`), -1) {
		out = append(out, m[1])
	}
	return out
}

// closeParen returns the index of the parenthesis closing the one at open.
func closeParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func splitLabels(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// checkQuery fails on a metric the registry does not export, a label a metric
// does not have (selector matchers; by/without of an aggregation against the
// metrics inside it; on/ignoring against the metrics of the expression), a
// rate/increase over a gauge, a delta/deriv over a counter, and a
// histogram_quantile not over _bucket by le. It is a regexp scan, not a PromQL
// parser: promtool (in .ci/run) checks the syntax of the rules.
func checkQuery(t *testing.T, have map[string]series, q query) {
	t.Helper()
	e := stringLit.ReplaceAllString(q.expr, `""`)
	if strings.Count(e, "(") != strings.Count(e, ")") || strings.Count(e, "{") != strings.Count(e, "}") {
		t.Errorf("%s: unbalanced brackets in %q", q.where, q.expr)
		return
	}
	sel := metricRe.FindAllStringSubmatchIndex(e, -1)
	if len(sel) == 0 {
		t.Errorf("%s: no relay metric in %q", q.where, q.expr)
		return
	}
	// inside returns the known metrics selected in e[from:to].
	inside := func(from, to int) []string {
		var out []string
		for _, m := range sel {
			if m[2] >= from && m[3] <= to {
				if _, ok := have[e[m[2]:m[3]]]; ok {
					out = append(out, e[m[2]:m[3]])
				}
			}
		}
		return out
	}
	for _, m := range sel {
		name := e[m[2]:m[3]]
		s, ok := have[name]
		if !ok {
			t.Errorf("%s: metric %s is not exported by the relay (expr %q)", q.where, name, q.expr)
			continue
		}
		if m[4] >= 0 {
			for _, lm := range matcherRe.FindAllStringSubmatch(e[m[4]:m[5]], -1) {
				if !s.labels[lm[1]] {
					t.Errorf("%s: %s has no label %q (labels %v)", q.where, name, lm[1], keys(s.labels))
				}
			}
		}
	}
	// Aggregations: by/without labels against the metrics they aggregate.
	for _, m := range aggRe.FindAllStringSubmatchIndex(e, -1) {
		open := m[1] - 1
		end := closeParen(e, open)
		if end < 0 {
			continue
		}
		labels := ""
		if m[6] >= 0 {
			labels = e[m[6]:m[7]]
		} else if g := regexp.MustCompile(`^\s*(?:by|without)\s*\(([^)]*)\)`).FindStringSubmatch(e[end+1:]); g != nil {
			labels = g[1]
		}
		for _, l := range splitLabels(labels) {
			for _, name := range inside(open, end) {
				if !have[name].labels[l] {
					t.Errorf("%s: aggregates %s by %q, a label it does not have (labels %v)", q.where, name, l, keys(have[name].labels))
				}
			}
		}
	}
	// on/ignoring/group_*: the label must exist on some metric of the expression.
	for _, g := range groupRe.FindAllStringSubmatch(e, -1) {
		if g[1] == "by" || g[1] == "without" {
			continue
		}
		for _, l := range splitLabels(g[2]) {
			found := false
			for _, name := range inside(0, len(e)) {
				found = found || have[name].labels[l]
			}
			if !found {
				t.Errorf("%s: %s(%s): no metric of the expression has label %q", q.where, g[1], g[2], l)
			}
		}
	}
	// Functions whose argument must be of one type.
	for _, m := range funcRe.FindAllStringSubmatchIndex(e, -1) {
		fn := e[m[2]:m[3]]
		open := m[1] - 1
		end := closeParen(e, open)
		if end < 0 {
			continue
		}
		names := inside(open, end)
		for _, name := range names {
			typ := have[name].typ
			switch fn {
			case "rate", "irate", "increase":
				if typ != "counter" && !strings.HasPrefix(typ, "histogram_") && !strings.HasPrefix(typ, "summary_") {
					t.Errorf("%s: %s over %s, a %s (rate/increase need a counter)", q.where, fn, name, typ)
				}
			case "delta", "deriv":
				if typ != "gauge" {
					t.Errorf("%s: %s over %s, a %s (use rate/increase for counters)", q.where, fn, name, typ)
				}
			case "histogram_quantile":
				if typ != "histogram_bucket" {
					t.Errorf("%s: histogram_quantile over %s, not a _bucket series", q.where, name)
				}
			}
		}
		if fn == "histogram_quantile" {
			body := e[open:end]
			by := regexp.MustCompile(`\bby\s*\(([^)]*)\)`).FindStringSubmatch(body)
			if len(names) == 0 || (strings.Contains(body, "sum") && (by == nil || !contains(splitLabels(by[1]), "le"))) {
				t.Errorf("%s: histogram_quantile must aggregate a _bucket series by (le, ...): %q", q.where, q.expr)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
