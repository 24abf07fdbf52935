// SPDX-License-Identifier: Apache-2.0

package gpuhealth

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/gpuhealth/gpuhealthtest"
)

// causes lists the problems' causes that take the node out of service,
// and those only reported.
func causes(ps []Problem) (out, reported []string) {
	for _, p := range ps {
		if p.Action == OutOfService {
			out = append(out, p.Cause)
		} else {
			reported = append(reported, p.Cause)
		}
	}
	return out, reported
}

func TestClassifySamples(t *testing.T) {
	for _, tc := range []struct {
		file          string
		th            Thresholds
		out, reported []string
		messageHas    string
	}{
		{file: "healthy.prom"},
		{file: "xid-error.prom", out: []string{"xid-79"}, messageHas: "GPU 1 (GPU-00000001-6c1e-4b2a-9d3f-0a1b2c3d4e5f) reported XID 79 (GPU has fallen off the bus)"},
		{file: "xid-13.prom", reported: []string{"xid-13"}, messageHas: "fails only the job that caused it"},
		{file: "xid-unknown.prom", reported: []string{"xid-999"}, messageHas: "not in trainops's table"},
		{file: "ecc.prom", out: []string{CauseRowRemapFailure, CauseECCDBE}},
		// Temperature counts only with a threshold.
		{file: "hot.prom"},
		{file: "hot.prom", th: Thresholds{MaxTemperature: 90}, out: []string{CauseTemperature}, messageHas: "91°C"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			gpus, err := ParseDCGM(strings.NewReader(string(gpuhealthtest.Sample(t, tc.file))))
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != 2 || !gpus[0].HasXID {
				t.Fatalf("%d GPUs (%+v), want 2 with their XID field", len(gpus), gpus)
			}
			ps := Classify(gpus, tc.th)
			out, reported := causes(ps)
			if !slices.Equal(out, tc.out) || !slices.Equal(reported, tc.reported) {
				t.Fatalf("out of service for %v, reported %v; want %v and %v", out, reported, tc.out, tc.reported)
			}
			if tc.messageHas != "" && !strings.Contains(ps[0].Message, tc.messageHas) {
				t.Errorf("message %q lacks %q", ps[0].Message, tc.messageHas)
			}
		})
	}
}

// TestXIDTable: the table is sorted (LookupXID searches it), each row's
// action follows its bucket, and the XIDs NVIDIA's catalog says need the
// GPU reset or the node rebooted are there.
func TestXIDTable(t *testing.T) {
	rows := XIDs()
	for i, x := range rows {
		if i > 0 && rows[i-1].Code >= x.Code {
			t.Fatalf("table not sorted at XID %d", x.Code)
		}
		want := Report
		if x.Bucket == "RESET_GPU" || x.Bucket == "RESTART_BM" {
			want = OutOfService
		} else if x.Bucket != "RESTART_APP" {
			t.Errorf("XID %d: bucket %q is none of the catalog's", x.Code, x.Bucket)
		}
		if x.Action != want {
			t.Errorf("XID %d (%s): action %v, want %v", x.Code, x.Bucket, x.Action, want)
		}
		if got, ok := LookupXID(x.Code); !ok || got != x {
			t.Errorf("LookupXID(%d) = %+v, %v", x.Code, got, ok)
		}
	}
	for _, code := range []int{48, 63, 64, 74, 79, 92, 94, 95, 119, 120} {
		if x, ok := LookupXID(code); !ok || x.Action != OutOfService {
			t.Errorf("XID %d: %+v, want out of service", code, x)
		}
	}
	for _, code := range []int{13, 31, 43, 45} {
		if x, ok := LookupXID(code); !ok || x.Action != Report {
			t.Errorf("XID %d: %+v, want reported only", code, x)
		}
	}
	if _, ok := LookupXID(1000); ok {
		t.Error("XID 1000 found")
	}
}

func TestFromCondition(t *testing.T) {
	for _, tc := range []struct {
		reason string
		cause  string
		action Action
		known  bool
	}{
		{"GPUFellOffTheBus", "GPUXidError", OutOfService, true},
		{"XID79", "xid-79", OutOfService, true},
		{"Xid_13", "xid-13", Report, true},
		{"xid-4242", "xid-4242", Report, false},
	} {
		p := FromCondition(corev1.NodeCondition{Type: "GPUXidError", Status: corev1.ConditionTrue, Reason: tc.reason, Message: "from the kernel log"})
		if p.Cause != tc.cause || p.Action != tc.action || p.Known != tc.known {
			t.Errorf("reason %s: %+v, want cause %s action %v known %v", tc.reason, p, tc.cause, tc.action, tc.known)
		}
		if !strings.Contains(p.Message, "GPUXidError") || !strings.Contains(p.Message, "from the kernel log") {
			t.Errorf("reason %s: message %q names neither the condition nor its message", tc.reason, p.Message)
		}
	}
}

// TestParseRefusesGarbage: what is not the exporter's text format is an
// error, never an empty, healthy reading.
func TestParseRefusesGarbage(t *testing.T) {
	for _, body := range []string{"not { prometheus\n", "<html><body>502</body></html>", "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\" 79\n"} {
		if gpus, err := ParseDCGM(strings.NewReader(body)); err == nil {
			t.Errorf("%q parsed as %+v", body, gpus)
		}
	}
}

func TestScrapeDCGMOverHTTP(t *testing.T) {
	body := gpuhealthtest.Sample(t, "xid-error.prom")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	gpus, err := ScrapeDCGM(context.Background(), srv.Client(), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := causes(Classify(gpus, Thresholds{})); !slices.Equal(out, []string{"xid-79"}) {
		t.Fatalf("out of service for %v", out)
	}
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	if _, err := ScrapeDCGM(context.Background(), notFound.Client(), notFound.URL); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("404: %v", err)
	}
}

// TestMetricsAreTheExporters holds the metrics read to the collectors file
// of the dcgm-exporter release the ClusterPolicy deploys by default
// (testdata/dcgm/upstream: etc/dcp-metrics-included.csv of
// NVIDIA/dcgm-exporter at that tag, unchanged): each is collected there,
// or commented out there and read only where a cluster turns it on.
func TestMetricsAreTheExporters(t *testing.T) {
	const release = "4.3.1-4.4.0"
	image := defaultExporterImage(t)
	if !strings.Contains(image, ":"+release+"-") {
		t.Fatalf("the exporter image %s is not release %s: refresh testdata/dcgm/upstream from that tag", image, release)
	}
	f, err := os.Open(filepath.Join("..", "..", "testdata", "dcgm", "upstream", "dcp-metrics-included.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	on, off := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		commented := strings.HasPrefix(line, "#")
		field, _, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ",")
		if !ok || !strings.HasPrefix(field, "DCGM_FI_") {
			continue
		}
		if commented {
			off[strings.TrimSpace(field)] = true
		} else {
			on[strings.TrimSpace(field)] = true
		}
	}
	for _, m := range MetricsRead {
		switch {
		case on[m]:
		case off[m] && m == MetricECCDBEVolatile:
		default:
			t.Errorf("%s is not in the exporter's collectors file (collected: %v, commented out: %v)", m, on[m], off[m])
		}
	}
}

// defaultExporterImage is the exporter image a ClusterPolicy gets by
// default, from the CRD trainops installs.
func defaultExporterImage(t *testing.T) string {
	t.Helper()
	s, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	cp := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gpu.trainops.dev/v1alpha1", "kind": "ClusterPolicy", "metadata": map[string]any{"name": "default"}, "spec": map[string]any{}}}
	if err := s.Default(cp); err != nil {
		t.Fatal(err)
	}
	image, _, _ := unstructured.NestedString(cp.Object, "spec", "dcgm", "exporter", "image")
	return image
}

// TestHeatActsOnlyOnWhatLasts: a hot reading is reported until the node
// has read hot, pass after pass, for the whole duration; a cool or
// unknown pass starts the wait again; other problems are untouched.
func TestHeatActsOnlyOnWhatLasts(t *testing.T) {
	hot := Problem{Cause: CauseTemperature, Action: OutOfService, Known: true, Message: "GPU 0 is at 91°C"}
	ecc := Problem{Cause: CauseECCDBE, Action: OutOfService, Known: true, Message: "ECC"}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := 5 * time.Minute
	var h Heat
	actions := func(ps []Problem) (out []Action) {
		for _, p := range ps {
			out = append(out, p.Action)
		}
		return out
	}
	steps := []struct {
		at   time.Duration
		in   []Problem
		want []Action
		msg  string
	}{
		{0, []Problem{hot, ecc}, []Action{Report, OutOfService}, "since 2026-01-02T03:04:05Z: out of service if it stays there for remediation.gpuTemperatureFor 5m0s"},
		{4 * time.Minute, []Problem{hot}, []Action{Report}, "since 2026-01-02T03:04:05Z: out of service"},
		{5 * time.Minute, []Problem{hot}, []Action{OutOfService}, "since 2026-01-02T03:04:05Z, longer than remediation.gpuTemperatureFor 5m0s"},
		{6 * time.Minute, nil, nil, ""},
		{7 * time.Minute, []Problem{hot}, []Action{Report}, "since 2026-01-02T03:11:05Z"},
		{11 * time.Minute, []Problem{hot}, []Action{Report}, "out of service if"},
		{12 * time.Minute, []Problem{hot}, []Action{OutOfService}, "longer than"},
	}
	for _, s := range steps {
		got := h.Sustained("n1", s.in, start.Add(s.at), d)
		if !slices.Equal(actions(got), s.want) {
			t.Fatalf("at %s: actions %v, want %v", s.at, actions(got), s.want)
		}
		if s.msg != "" && !strings.Contains(got[0].Message, s.msg) {
			t.Fatalf("at %s: %q lacks %q", s.at, got[0].Message, s.msg)
		}
	}
	if hot.Action != OutOfService || !strings.HasSuffix(hot.Message, "91°C") {
		t.Fatal("Sustained changed the problem it was given")
	}
	// Another node has its own wait; a node no longer a GPU node is
	// forgotten.
	if got := h.Sustained("n2", []Problem{hot}, start.Add(12*time.Minute), d); got[0].Action != Report {
		t.Fatal("a second node took the first node's wait")
	}
	h.Retain(map[string]bool{"n2": true})
	if got := h.Sustained("n1", []Problem{hot}, start.Add(13*time.Minute), d); got[0].Action != Report {
		t.Fatal("a forgotten node kept its wait")
	}
}
