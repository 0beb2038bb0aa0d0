package etcdmeta_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs the rapid model with 25 checks unless -rapid.checks says
// otherwise: each check is hundreds of round trips through a 3-member
// cluster, and 100 of them take over a minute on a loaded 2-core machine.
// Run with -rapid.checks=100 (or more) for the full model.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		if err := flag.Set("rapid.checks", "25"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
