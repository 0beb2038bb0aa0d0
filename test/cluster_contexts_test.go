package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acyclicfs/acyclicfs/internal/etcdtest"
)

// TestTwoNodesContexts: contexts, landings and their parent claims are
// store-wide on etcd (docs/scale-out.md "Nodes: what is shared"). A
// context made on A is listed on B and B forks it; A sees B's child. A
// landing B started (killed after claiming the parent context) holds its
// claim on A too — A's landing into the same parent is refused, and A's
// recovery leaves B's landing alone — until B's next command recovers it.
func TestTwoNodesContexts(t *testing.T) {
	c := etcdtest.Start(t)
	a := contextEnvIn(t, clusterNode(t, c, "ctx", "node-a"))
	b := clusterNode(t, c, "ctx", "node-b")

	if r := b.run("context", "list"); r.code != 0 || !strings.Contains(r.stdout, "main") || !strings.Contains(r.stdout, "c1") {
		t.Fatalf("B does not list A's contexts: %s", r)
	}
	b.ok("context", "fork", "main", "c2")
	if r := a.run("context", "show", "c2"); r.code != 0 || !strings.Contains(r.stdout, "parent\tmain") && !strings.Contains(r.stdout, "parent main") {
		t.Fatalf("A does not see B's child context c2 of main: %s", r)
	}
	if r := a.run("list"); r.code != 0 || !strings.Contains(r.stdout, "c2.app") {
		t.Fatalf("A does not list the roots B forked: %s", r)
	}

	a.commitFiles("c1.app", map[string]string{"f": "app 2\n"})
	b.runCrash("context.land.after-claim", "context", "land", "c1")
	if r := a.fails(4, "context", "land", "c2"); !strings.Contains(r.stderr, "claimed") {
		t.Fatalf("A's landing into main while B's holds its claim: %s", r)
	}
	if r := a.run("context", "land", "c2"); r.code != 4 {
		t.Fatalf("A's recovery released B's claim: %s", r)
	}
	b.ok("list") // B recovers its own landing: rolled back, claim released
	if r := a.run("context", "land", "c2"); r.code != 0 {
		t.Fatalf("A's landing after B's recovery: %s", r)
	}
	if r := b.run("context", "land", "c1"); r.code != 0 || !strings.Contains(r.stdout, "\tlanded\t") {
		t.Fatalf("B's landing of c1 after recovery: %s", r)
	}
	if ha, hb := a.head("app"), b.head("c1.app"); ha != hb {
		t.Fatalf("app at %s on A, c1.app at %s on B", ha, hb)
	}
	a.fsck()

	// A context record a node kept in STORE/state before contexts were
	// shared is not read any more, and every command says so.
	old := filepath.Join(b.store, "state", "contexts")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "6f6c64.json"), []byte(`{"revision":1,"value":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := b.run("list"); r.code != 0 || !strings.Contains(r.stderr, old+" holds 1 records") {
		t.Fatalf("B does not warn about its old local context record: %s", r)
	}

}
