package osfile

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// CopySparse copies content and holes: the copy reads the same, has the
// same data map, and a dense file stays dense.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		size int64
		data map[int64]string
	}{
		{"holes", 64 << 20, map[int64]string{0: "head", 32 << 20: "middle"}},
		{"trailing data", 8 << 20, map[int64]string{8<<20 - 4: "tail"}},
		{"all hole", 8 << 20, nil},
		{"dense", 5000, map[int64]string{0: string(bytes.Repeat([]byte("x"), 5000))}},
		{"empty", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := os.Create(filepath.Join(dir, tc.name+".src"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if err := src.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			for off, s := range tc.data {
				if _, err := src.WriteAt([]byte(s), off); err != nil {
					t.Fatal(err)
				}
			}
			dst, err := os.Create(filepath.Join(dir, tc.name+".dst"))
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			if err := CopySparse(dst, src, tc.size); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(src.Name())
			b, _ := os.ReadFile(dst.Name())
			if !bytes.Equal(a, b) {
				t.Fatalf("copy differs (%d vs %d bytes)", len(a), len(b))
			}
			var regions [2][][2]int64
			for i, f := range []*os.File{src, dst} {
				if err := DataExtents(f, tc.size, func(off, end int64) error {
					regions[i] = append(regions[i], [2]int64{off, end})
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if len(regions[0]) != len(regions[1]) {
				t.Fatalf("data map %v, source's %v", regions[1], regions[0])
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(int(dst.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if tc.size > 1<<20 && st.Blocks*512 > 1<<20 {
				t.Fatalf("copy of a sparse file takes %d bytes", st.Blocks*512)
			}
		})
	}
}
