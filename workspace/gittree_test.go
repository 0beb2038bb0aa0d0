package workspace

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseGitTree: any bytes decode or fail cleanly; what decodes
// encodes back to the same bytes when it was in git's order.
func FuzzParseGitTree(f *testing.F) {
	f.Add(encodeGitTree([]gitEntry{{mode: "100644", name: "a.txt", oid: "0123456789abcdef0123456789abcdef01234567"},
		{mode: "40000", name: "d", oid: "89abcdef0123456789abcdef0123456789abcdef"}}))
	f.Add([]byte("100644 \x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ents, err := parseGitTree(data, 20)
		if err != nil {
			return
		}
		if re := encodeGitTree(append([]gitEntry(nil), ents...)); len(re) != len(data) {
			t.Fatalf("re-encoding changed the length: %d -> %d", len(data), len(re))
		}
	})
}

// FuzzOIDCacheFile: any file content loads (as empty when damaged) and
// never panics; a saved cache loads back equal.
func FuzzOIDCacheFile(f *testing.F) {
	f.Add([]byte(oidCacheMagic+"short"), false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, data []byte, sealed bool) {
		p := filepath.Join(t.TempDir(), "git-oids-sha1")
		if sealed { // a valid trailer over arbitrary records
			data = append([]byte(oidCacheMagic), data...)
			sum := sha256.Sum256(data)
			data = append(data, sum[:]...)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got := loadOIDCache(p, "sha1")
		for _, s := range got {
			if !s.empty && len(s.oid) != 40 {
				t.Fatalf("a loaded name of %d hex digits", len(s.oid))
			}
		}
	})
}

func TestOIDCacheRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := map[[32]byte]oidSlot{
		{1}: {oid: "0123456789abcdef0123456789abcdef01234567"},
		{2}: {empty: true},
	}
	m.gn.oids.mu.Lock()
	t1 := m.gn.oidTable("sha1")
	for k, v := range want {
		t1[k] = v
	}
	m.gn.oids.dirty["sha1"] = true
	m.gn.oids.mu.Unlock()
	if err := m.gn.saveOIDCache("sha1"); err != nil {
		t.Fatal(err)
	}
	got := loadOIDCache(m.gn.oidCachePath("sha1"), "sha1")
	if len(got) != len(want) || got[[32]byte{1}] != want[[32]byte{1}] || got[[32]byte{2}] != want[[32]byte{2}] {
		t.Fatalf("loaded %v, saved %v", got, want)
	}
	// One flipped byte: the file reads as empty.
	data, _ := os.ReadFile(m.gn.oidCachePath("sha1"))
	data[len(oidCacheMagic)+5] ^= 1
	os.WriteFile(m.gn.oidCachePath("sha1"), data, 0o644)
	if got := loadOIDCache(m.gn.oidCachePath("sha1"), "sha1"); len(got) != 0 {
		t.Fatalf("a damaged file loaded %d names", len(got))
	}
}
