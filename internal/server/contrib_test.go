package server

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
)

// exportedNames lists every metric name a server registers (a histogram's
// series names included).
func exportedNames(t *testing.T, m *metrics) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range m.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if mm := fqName.FindStringSubmatch(d.String()); mm != nil {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				names[mm[1]+suffix] = true
			}
		}
	}
	return names
}

var meridianMetric = regexp.MustCompile(`\bmeridian_[a-z0-9_]+`)

// TestContribMetricsExist: every meridian_* name that the Grafana
// dashboard and the Prometheus alert rules in contrib/ use is a metric the
// server exports, so a rename cannot silently blank a panel or disarm an
// alert.
func TestContribMetricsExist(t *testing.T) {
	m := newMetrics()
	m.register(newLatencyCollector(nil))
	names := exportedNames(t, m)

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile("../../contrib/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	for _, want := range []string{"MeridianNoLeader", "MeridianFrequentLeaderChanges", "MeridianFsyncLatencyHigh",
		"MeridianProposalsFailing", "MeridianPeerUnreachable", "MeridianSnapshotStuck"} {
		if exprs["alert "+want] == "" {
			t.Errorf("alerts.yaml has no alert %s", want)
		}
	}

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile("../../contrib/grafana/meridian.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("meridian.json: %v", err)
	}
	for _, p := range dash.Panels {
		var es []string
		for _, tg := range p.Targets {
			es = append(es, tg.Expr)
		}
		exprs["panel "+p.Title] = strings.Join(es, "\n")
	}
	if len(dash.Panels) == 0 {
		t.Fatal("meridian.json has no panels")
	}

	for where, expr := range exprs {
		used := meridianMetric.FindAllString(expr, -1)
		if len(used) == 0 {
			t.Errorf("%s uses no meridian metric: %q", where, expr)
		}
		for _, name := range used {
			if !names[name] {
				t.Errorf("%s uses %s, which the server does not export", where, name)
			}
		}
	}
}
