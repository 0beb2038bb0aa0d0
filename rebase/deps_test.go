package rebase

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsStayInLayer keeps rebase a layer-1 package: it may import the
// standard library and store, nothing else (tests may add rapid and
// rebasetest).
func TestImportsStayInLayer(t *testing.T) {
	for _, dir := range []string{".", "rebasetest"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			test := strings.HasSuffix(f, "_test.go")
			for _, imp := range af.Imports {
				p := strings.Trim(imp.Path.Value, `"`)
				switch {
				case !strings.Contains(strings.Split(p, "/")[0], "."):
					// standard library
				case p == "github.com/acyclicfs/acyclicfs/store":
				case test && (p == "pgregory.net/rapid" || p == "github.com/acyclicfs/acyclicfs/rebase/rebasetest"):
				default:
					t.Errorf("%s imports %s", f, p)
				}
			}
		}
	}
}
