// Package test holds end-to-end tests that drive the real acyclicfs binary
// and real FUSE mounts, plus architecture checks.
package test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/acyclicfs/acyclicfs"

// layers gives each package its layer (DESIGN.md "Packages and import
// direction"). A package may import only packages of strictly lower layers.
var layers = map[string]int{
	"meta":                    -1,
	"meta/metatest":           0,
	"meta/etcdmeta":           0,
	"store":                   0,
	"blobs":                   -1,
	"blobs/blobtest":          0,
	"blobs/s3blobs":           0,
	"store/storetest":         1,
	"corestate":               0,
	"rebase":                  1,
	"window":                  1,
	"window/windowtest":       2,
	"rebase/gitmerge":         2,
	"rebase/mergedriver":      2,
	"workspace":               3,
	"workspace/contexts":      2,
	"workspace/errs":          0,
	"fusefs":                  4,
	"fusefs/sessions":         0,
	"fusefs/uring":            3,
	"daemon":                  5,
	"cluster":                 1,
	"cmd/acyclicfs":           6,
	"cmd/acyclicfs-fsmonitor": 6,
	"internal/failpoint":      0,
	"internal/dirfd":          -1,
	"internal/dirwatch":       -1,
	"internal/fusectl":        -1,
	"internal/osfile":         -2,
	"internal/lockfile":       -1,
	"internal/pathino":        -1,
	"internal/fsmtoken":       -1,
	"internal/fsmhook":        0,
	"internal/gitrepo":        -1,
	"internal/gitsafe":        -2,
	"internal/etcdtest":       -1,
	"internal/weedtest":       -1,
	"internal/testport":       -2,
	"rebase/rebasetest":       2,
}

// goFuseOwners are the only packages allowed to import go-fuse.
var goFuseOwners = map[string]bool{"fusefs": true, "fusefs/uring": true}

func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if pkg == "test" || strings.HasPrefix(pkg, "test/") {
			continue
		}
		layer, ok := layers[pkg]
		if !ok {
			t.Errorf("package %q has no layer in layers_test.go: add it", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "github.com/hanwen/go-fuse") && !goFuseOwners[pkg] {
				t.Errorf("%s imports go-fuse; only fusefs and fusefs/uring may", pkg)
			}
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			dl, ok := layers[dep]
			if !ok {
				continue // reported when dep itself is listed
			}
			if dl >= layer {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point to lower layers", pkg, layer, dep, dl)
			}
		}
	}
	if seen == 0 {
		t.Fatal("go list returned no project packages")
	}
}
