package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseMetaURL(t *testing.T) {
	good := []struct {
		in     string
		eps    []string
		prefix string
	}{
		{"etcd://127.0.0.1:2379/acyclicfs", []string{"http://127.0.0.1:2379"}, "/acyclicfs"},
		{"etcd://a:1,b:2,[::1]:3/team/one/", []string{"http://a:1", "http://b:2", "http://[::1]:3"}, "/team/one"},
	}
	for _, g := range good {
		eps, prefix, err := ParseMetaURL(g.in)
		if err != nil || !slices.Equal(eps, g.eps) || prefix != g.prefix {
			t.Errorf("ParseMetaURL(%q) = %v %q %v, want %v %q", g.in, eps, prefix, err, g.eps, g.prefix)
		}
	}
	for _, bad := range []string{
		"", "http://a:1/p", "etcd://a:1", "etcd://a:1/", "etcd:///p", "etcd://a/p", "etcd://a:0/p",
		"etcd://a:99999/p", "etcd://a:x/p", "etcd://a:1,/p", "etcd://a:1/p?tls=1", "etcd://a:1/p#f",
		"etcd://a:1/p\x00q", "etcd://:1/p",
		"etcd://u:pw@a:1/p", "etcd://u@a:1/p?password=x", "etcd://a:1/p?ca=/ca.pem", "etcds://a:1/p?cert=/c.pem",
		"etcds://a:1/p?key=/k.pem", "etcd://a:1/p?password-file=/pw", "etcds://a:1/p?ca=", "etcds://a:1/p?ca=/a&ca=/b",
		"etcds://@a:1/p",
	} {
		if _, _, err := ParseMetaURL(bad); !errors.Is(err, ErrBadConfig) {
			t.Errorf("ParseMetaURL(%q): %v, want ErrBadConfig", bad, err)
		}
	}
}

// TestParseMetaTLSAndUser: etcds:// and its options, a user, and a
// password quoted in an error masked.
func TestParseMetaTLSAndUser(t *testing.T) {
	c, err := ParseMeta("etcds://team%201@a:1,b:2/p?ca=/etc/ca.pem&cert=/c%20d.pem&key=/k.pem&password-file=/pw")
	want := Config{Endpoints: []string{"https://a:1", "https://b:2"}, Prefix: "/p", CAFile: "/etc/ca.pem", CertFile: "/c d.pem",
		KeyFile: "/k.pem", User: "team 1", PasswordFile: "/pw"}
	if err != nil || !slices.Equal(c.Endpoints, want.Endpoints) || c.Prefix != want.Prefix || c.CAFile != want.CAFile ||
		c.CertFile != want.CertFile || c.KeyFile != want.KeyFile || c.User != want.User || c.PasswordFile != want.PasswordFile {
		t.Fatalf("ParseMeta = %+v %v, want %+v", c, err, want)
	}
	c.Version, c.Node = ConfigVersion, "n"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate of a parsed TLS config: %v (MetaURL %s)", err, c.MetaURL())
	}
	if _, err := ParseMeta("etcd://u:hunter2@a:1/p"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a password in the URL: %v, want refused and masked", err)
	}
	if _, err := ParseMeta("etcds://a:1/p?password=hunter2&ca=/x"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a password option: %v, want refused and masked", err)
	}
}

// TestPasswordFile: the password file's mode is checked, its newline
// dropped; the environment is the fallback.
func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pw")
	if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pw, err := password(Config{User: "u", PasswordFile: p}); err != nil || pw != "s3cret" {
		t.Errorf("password = %q %v", pw, err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := password(Config{User: "u", PasswordFile: p}); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a group-readable password file: %v", err)
	}
	t.Setenv(PasswordEnv, "")
	if _, err := password(Config{User: "u"}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("no password at all: %v", err)
	}
	t.Setenv(PasswordEnv, "from-env")
	if pw, err := password(Config{User: "u"}); err != nil || pw != "from-env" {
		t.Errorf("password from the environment = %q %v", pw, err)
	}
}

// FuzzParseMetaURL: whatever ParseMeta accepts, MetaURL spells back to
// the same configuration; nothing panics.
func FuzzParseMetaURL(f *testing.F) {
	for _, s := range []string{"etcd://127.0.0.1:2379/acyclicfs", "etcd://a:1,b:2/x/y", "etcd://[::1]:3/%00",
		"etcds://u@a:1/p?ca=/ca&cert=/c&key=/k&password-file=/pw"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseMeta(s)
		if err != nil {
			return
		}
		c2, err := ParseMeta(c.MetaURL())
		if err != nil || !slices.Equal(c.Endpoints, c2.Endpoints) || c.Prefix != c2.Prefix || c.User != c2.User ||
			c.CAFile != c2.CAFile || c.CertFile != c2.CertFile || c.KeyFile != c2.KeyFile || c.PasswordFile != c2.PasswordFile {
			t.Fatalf("%q -> %+v -> %q -> %+v %v", s, c, c.MetaURL(), c2, err)
		}
	})
}

func TestNodeNames(t *testing.T) {
	a, b := DefaultNode("/srv/a"), DefaultNode("/srv/b")
	if a == b {
		t.Errorf("two store paths gave one node name %q", a)
	}
	for _, n := range []string{a, b, "node-1", "A.b_c"} {
		if err := ValidateNode(n); err != nil {
			t.Errorf("ValidateNode(%q): %v", n, err)
		}
	}
	for _, n := range []string{"", "-a", ".a", "a b", "a/b", string(make([]byte, 65))} {
		if err := ValidateNode(n); !errors.Is(err, ErrBadConfig) {
			t.Errorf("ValidateNode(%q): %v, want ErrBadConfig", n, err)
		}
	}
}

func TestWriteLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	cfg := Config{Version: ConfigVersion, Endpoints: []string{"http://127.0.0.1:2379"}, Prefix: "/p", Node: "a"}
	if created, err := Write(dir, cfg); err != nil || !created {
		t.Fatalf("Write: %v %v", created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, ConfigName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cluster.json: %v %v, want mode 0600", fi, err)
	}
	got, found, err := Load(dir)
	if err != nil || !found || !got.Same(cfg) {
		t.Fatalf("Load: %+v %v %v", got, found, err)
	}
	if created, err := Write(dir, cfg); err != nil || created {
		t.Fatalf("Write again: %v %v, want unchanged", created, err)
	}
	other := cfg
	other.Prefix = "/q"
	if _, err := Write(dir, other); !errors.Is(err, ErrConfigDiffers) {
		t.Fatalf("Write of another config: %v, want ErrConfigDiffers", err)
	}
	if got, _, _ := Load(dir); !got.Same(cfg) {
		t.Fatalf("refused Write changed the config: %+v", got)
	}
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "meta.db"), nil, 0o600)
	if _, err := Write(local, cfg); !errors.Is(err, ErrConfigDiffers) {
		t.Fatalf("Write into a local store: %v, want ErrConfigDiffers", err)
	}
	for _, bad := range []string{`{`, `{"version":2,"endpoints":["http://a:1"],"prefix":"/p","node":"a"}`,
		`{"version":1,"endpoints":["http://a:1"],"prefix":"/p","node":"a","extra":1}`,
		`{"version":1,"endpoints":[],"prefix":"/p","node":"a"}`,
		`{"version":1,"endpoints":["http://a:1"],"prefix":"","node":"a"}`,
		`{"version":1,"endpoints":["http://a:1/x"],"prefix":"/p","node":"a"}`,
		`{"version":1,"endpoints":["http://a:1","https://b:2"],"prefix":"/p","node":"a"}`,
		`{"version":1,"endpoints":["http://a:1"],"prefix":"p","node":"a"}`} {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, ConfigName), []byte(bad), 0o600)
		if _, _, err := Load(d); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Load(%s): %v, want ErrBadConfig", bad, err)
		}
	}
}

// FuzzLoad: any bytes as cluster.json are loaded or refused with
// ErrBadConfig, never a panic; what loads is valid and written back the
// same.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"version":1,"endpoints":["http://127.0.0.1:2379"],"prefix":"/p","node":"a"}`))
	f.Add([]byte(`{"version":1,"endpoints":["http://a:1","http://b:2"],"prefix":"/p/q","node":"n-1","claim_ttl_seconds":3}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, found, err := Load(dir)
		if !found {
			t.Fatal("cluster.json not found")
		}
		if err != nil {
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("Load: %v, want ErrBadConfig", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded config invalid: %v", err)
		}
		other := filepath.Join(t.TempDir(), "n")
		if _, err := Write(other, cfg); err != nil {
			t.Fatalf("Write of a loaded config: %v", err)
		}
		back, _, err := Load(other)
		if err != nil || !back.Same(cfg) {
			t.Fatalf("round trip: %+v %v, want %+v", back, err, cfg)
		}
	})
}

func TestParseBlobs(t *testing.T) {
	if got, err := ParseBlobs("/srv/blobs/"); err != nil || got != "/srv/blobs" {
		t.Errorf("ParseBlobs(/srv/blobs/) = %q, %v", got, err)
	}
	// An S3 spec is kept canonically, and parses back to itself.
	got, err := ParseBlobs("s3://bucket/p/?region=r1&endpoint=h:9000&insecure=1")
	if err != nil || !strings.HasPrefix(got, "s3://bucket/p?") {
		t.Fatalf("ParseBlobs(s3 spec) = %q, %v", got, err)
	}
	if again, err := ParseBlobs(got); err != nil || again != got {
		t.Errorf("ParseBlobs(%q) = %q, %v: not canonical", got, again, err)
	}
	for _, bad := range []string{"rel/dir", "ftp://h/p", "/a\nb", "s3://bucket/p", "s3://B_ad/p?endpoint=h:1", "s3://bucket/../p?endpoint=h:1"} {
		if _, err := ParseBlobs(bad); !errors.Is(err, ErrBadConfig) {
			t.Errorf("ParseBlobs(%q): %v, want ErrBadConfig", bad, err)
		}
	}
	base := Config{Version: ConfigVersion, Endpoints: []string{"http://a:1"}, Prefix: "/p", Node: "n"}
	ok := base
	ok.Blobs, ok.CacheBytes = "/srv/blobs", 1<<20
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate with blobs: %v", err)
	}
	for _, bad := range []Config{
		func() Config { c := base; c.CacheBytes = 1; return c }(),      // a cache with no remote
		func() Config { c := ok; c.CacheBytes = -1; return c }(),       // negative
		func() Config { c := ok; c.Blobs = "/srv/x/../b"; return c }(), // not clean
	} {
		if err := bad.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Validate(%+v): %v, want ErrBadConfig", bad, err)
		}
	}
	if ok.Same(base) {
		t.Error("configs differing in blobs are Same")
	}
}
