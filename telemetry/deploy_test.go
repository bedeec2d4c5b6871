package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/telemetry"
)

// registeredNames returns the metric names Metrics registers, after one
// event of each kind gave every metric a series.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := telemetry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := m.AcquireStarted(context.Background(), observe.Event{Kind: observe.AcquireStart})
	for _, e := range []observe.Event{
		{Kind: observe.Acquired},
		{Kind: observe.Renewed},
		{Kind: observe.Lost, Reason: observe.LossUnreachable},
		{Kind: observe.Released, Reason: observe.ReleaseLost},
		{Kind: observe.StoreCall, Op: "acquire", Err: errors.New("down")},
	} {
		m.Observe(ctx, e)
	}
	m.Degradation("g", true, time.Second)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	if len(names) != 11 {
		t.Fatalf("%d metrics gathered, want all 11: %v", len(names), names)
	}
	return names
}

var metricRef = regexp.MustCompile(`\bdistlock_[a-z_]+`)

// checkExpr fails unless expr references at least one metric and only
// metrics that exist.
func checkExpr(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: expression references no distlock metric: %s", where, expr)
	}
	for _, r := range refs {
		base := r
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(r, suffix); ok && names[b] {
				base = b
			}
		}
		if !names[base] {
			t.Errorf("%s: %s is not a metric of package telemetry", where, r)
		}
	}
}

func TestPrometheusAlerts(t *testing.T) {
	names := registeredNames(t)
	b, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || alerts[r.Alert] || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: needs a unique name, a severity label and a summary", r.Alert)
			}
			alerts[r.Alert] = true
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for: %v", r.Alert, err)
				}
			}
			checkExpr(t, r.Alert, r.Expr, names)
		}
	}
	for _, want := range []string{"DistlockHoldTimeHigh", "DistlockLocksLost", "DistlockDegraded", "DistlockAcquireErrors"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

func TestGrafanaDashboard(t *testing.T) {
	names := registeredNames(t)
	b, err := os.ReadFile("../deploy/grafana/distlock.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Panels        []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			GridPos struct {
				W, H int
			} `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion == 0 || len(dash.Panels) == 0 {
		t.Fatalf("dashboard lacks uid, title, schemaVersion or panels")
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] || p.Title == "" || p.Type == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %d %q: needs a unique id, a title, a type, a size and targets", p.ID, p.Title)
		}
		ids[p.ID] = true
		for _, tg := range p.Targets {
			checkExpr(t, p.Title, tg.Expr, names)
			for _, r := range metricRef.FindAllString(tg.Expr, -1) {
				used[strings.TrimSuffix(r, "_bucket")] = true
			}
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			checkExpr(t, "variable "+v.Name, v.Definition, names)
		}
	}
	for n := range names {
		if !used[n] {
			t.Errorf("the dashboard shows no panel of %s", n)
		}
	}
}
