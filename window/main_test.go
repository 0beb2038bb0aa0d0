package window_test

import (
	"flag"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Under the race detector on a small machine, run fewer random
	// interleavings unless the caller asked for a number explicitly.
	if raceEnabled && os.Getenv("RAPID_CHECKS") == "" {
		explicit := false
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
		if !explicit {
			_ = flag.Set("rapid.checks", "30")
		}
	}
	os.Exit(m.Run())
}
