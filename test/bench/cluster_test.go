package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterSmoke runs the cluster group alone (-only-cluster, one run)
// when ACYCLICFS_BENCH_SMOKE=1 (root, /dev/fuse): every row has both
// systems' times, the etcd requests are counted, and nothing is left
// mounted.
func TestClusterSmoke(t *testing.T) {
	if os.Getenv("ACYCLICFS_BENCH_SMOKE") != "1" {
		t.Skip("set ACYCLICFS_BENCH_SMOKE=1 to run the cluster group smoke test (root, /dev/fuse)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	out := filepath.Join(t.TempDir(), "bench.md")
	if err := os.WriteFile(out, []byte("# report\n"+censusHeading+"\n\nold census\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"-only-cluster", "-cluster-runs", "1", "-out", out, "-png", ""})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "failed:") {
		t.Fatalf("group failed:\n%s", s)
	}
	for _, op := range clusterOps {
		var row string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "| "+op.label+" |") {
				row = l
			}
		}
		cells := strings.Split(row, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[2]) == "—" || strings.TrimSpace(cells[3]) == "—" {
			t.Errorf("row %q lacks a time: %q", op.label, row)
		}
	}
	if !strings.Contains(s, "Range ") || !strings.Contains(s, "old census") || strings.Index(s, clusterHeading) > strings.Index(s, censusHeading) {
		t.Errorf("report:\n%s", s)
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), "/cluster/mnt/") {
		t.Errorf("a cluster mount is left:\n%s", m)
	}
}

func TestSpliceSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.md")
	sec := clusterHeading + "\n\nnew rows\n"
	// Absent file: the section alone.
	if err := spliceSection(p, clusterHeading, sec); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != strings.TrimLeft(sec, "\n") {
		t.Errorf("new file: %q", b)
	}
	// No section yet: inserted before the census, the rest kept.
	old := "# r\n\n## Results\n\nx\n" + censusHeading + "\n\ncensus\n\n" + analysisMarker + "\nnotes\n"
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spliceSection(p, clusterHeading, sec); err != nil {
		t.Fatal(err)
	}
	want := "# r\n\n## Results\n\nx\n" + clusterHeading + "\n\nnew rows\n" + censusHeading + "\n\ncensus\n\n" + analysisMarker + "\nnotes\n"
	if b, _ := os.ReadFile(p); string(b) != want {
		t.Errorf("inserted:\n%s\nwant:\n%s", b, want)
	}
	// Present: replaced up to the next section, once.
	sec2 := clusterHeading + "\n\nnewer rows\n"
	if err := spliceSection(p, clusterHeading, sec2); err != nil {
		t.Fatal(err)
	}
	want = strings.Replace(want, "new rows", "newer rows", 1)
	if b, _ := os.ReadFile(p); string(b) != want {
		t.Errorf("replaced:\n%s\nwant:\n%s", b, want)
	}
	if got := keptSection(p, clusterHeading); got != strings.TrimLeft(sec2, "\n") && got != sec2 {
		t.Errorf("keptSection = %q", got)
	}
	// Last section before the analysis: the analysis stays.
	old = "# r\n" + clusterHeading + "\n\nold\n\n" + analysisMarker + "\nnotes\n"
	if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spliceSection(p, clusterHeading, sec); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "# r\n"+clusterHeading+"\n\nnew rows\n\n"+analysisMarker+"\nnotes\n" {
		t.Errorf("before analysis: %q", b)
	}
}

func TestEtcdRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `# HELP grpc_server_handled_total x
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 12
grpc_server_handled_total{grpc_code="NotFound",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 3
grpc_server_handled_total{grpc_code="OK",grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 1
grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 4
grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 15
grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 9
etcd_disk_wal_fsync_duration_seconds_sum 0.0125
etcd_disk_wal_fsync_duration_seconds_count 5
`)
	}))
	defer srv.Close()
	got, err := etcdRequests(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Range": 15, "Watch (stream msg)": 4, walFsyncKey: 5, walFsyncUsKey: 12500}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	sum := rpcSummary([]map[string]int{
		{"Range": 8, "Txn": 1, walFsyncKey: 1, walFsyncUsKey: 2000},
		{"Range": 10, walFsyncKey: 0},
		{"Range": 9, "Txn": 1, walFsyncKey: 1, walFsyncUsKey: 1000},
	})
	if sum != "10: Range 9, Txn 1; WAL fsyncs 1 (1.0 ms)" {
		t.Errorf("rpcSummary = %q", sum)
	}
}
