package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/acyclicfs/acyclicfs/blobs/s3blobs"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/osfile"
)

// ConfigName is the node's configuration file in the store directory.
const ConfigName = "cluster.json"

// ConfigVersion is the version of cluster.json this package writes and
// reads; a file of another version is refused (ErrBadConfig).
const ConfigVersion = 1

// DefaultClaimTTL is the TTL of the etcd lease a node's claims are bound
// to: a node that died or stopped loses its claims this long after its
// last keep-alive.
const DefaultClaimTTL = 10 * time.Second

var (
	// ErrBadConfig: a --meta URL, a node name or cluster.json is not
	// valid. Nothing was written.
	ErrBadConfig = errors.New("invalid cluster configuration")
	// ErrConfigDiffers: init was asked to configure a store directory that
	// already is a node with another configuration, or a local store.
	// Nothing was changed.
	ErrConfigDiffers = errors.New("store is already configured differently")
	// ErrUnreachable: no etcd endpoint answered within the dial timeout.
	ErrUnreachable = errors.New("etcd unreachable")
	// ErrClaimed: the workspace is claimed (mounted) by another node.
	ErrClaimed = errors.New("workspace is mounted on another node")
)

// Config is cluster.json. Every field is part of the on-disk format
// (docs/format.md).
type Config struct {
	Version int `json:"version"`
	// Endpoints are etcd's client URLs (http://HOST:PORT).
	Endpoints []string `json:"endpoints"`
	// Prefix is the store's prefix in etcd ("/acyclicfs/team1").
	Prefix string `json:"prefix"`
	// Node is this node's name, unique among the nodes of the prefix.
	Node string `json:"node"`
	// ClaimTTLSeconds is the TTL of the node's claims' lease (0: the
	// default, DefaultClaimTTL).
	ClaimTTLSeconds int `json:"claim_ttl_seconds,omitempty"`
	// Blobs is the shared blob plane every node keeps its objects on: an
	// absolute directory (NFS and the like; blobs.OpenShared) or an S3
	// spec s3://BUCKET[/PREFIX]?endpoint=… (s3blobs.ParseSpec). Empty: each
	// node's blobs stay in its own objects/.
	Blobs string `json:"blobs,omitempty"`
	// CacheBytes bounds the node's objects/ when Blobs is set (0:
	// unbounded).
	CacheBytes int64 `json:"cache_bytes,omitempty"`
	// CAFile, CertFile and KeyFile are the TLS files of https endpoints
	// (etcds://): the CA that signed the members' certificates (empty:
	// the system's roots) and the client certificate and its key (both or
	// neither). Absolute paths.
	CAFile   string `json:"ca_file,omitempty"`
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// User is the etcd user the node authenticates as (empty: none). Its
	// password is read from PasswordFile (an absolute path, a file only
	// its owner may read) or, without one, from $ACYCLICFS_ETCD_PASSWORD
	// (PasswordEnv); cluster.json never holds it.
	User         string `json:"user,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
}

// PasswordEnv is the environment variable that gives the etcd user's
// password to a node without a password file.
const PasswordEnv = "ACYCLICFS_ETCD_PASSWORD"

// ParseBlobs checks a --blobs value: an absolute directory (made absolute
// by the caller) or s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&insecure=1]
// [&region=R] (package s3blobs), and returns it as cluster.json keeps it
// (a clean path; the spec spelled canonically).
func ParseBlobs(s string) (string, error) {
	switch {
	case strings.HasPrefix(s, "s3://"):
		spec, err := s3blobs.ParseSpec(s)
		if err != nil {
			return "", fmt.Errorf("%w: --blobs: %w", ErrBadConfig, err)
		}
		return spec.String(), nil
	case strings.Contains(s, "://"):
		return "", fmt.Errorf("%w: --blobs %q: want a directory or s3://BUCKET/PREFIX", ErrBadConfig, s)
	case !filepath.IsAbs(s):
		return "", fmt.Errorf("%w: --blobs %q: the shared directory must be an absolute path", ErrBadConfig, s)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("%w: --blobs %q holds a control character", ErrBadConfig, s)
		}
	}
	return filepath.Clean(s), nil
}

// blobsNote is ", blobs in DIR" for a configuration with shared blobs.
func (c Config) blobsNote() string {
	if c.Blobs == "" {
		return ""
	}
	return ", blobs in " + c.Blobs
}

// ClaimTTL returns the TTL of the node's claims.
func (c Config) ClaimTTL() time.Duration {
	if c.ClaimTTLSeconds > 0 {
		return time.Duration(c.ClaimTTLSeconds) * time.Second
	}
	return DefaultClaimTTL
}

// MetaURL spells the configuration's metadata plane as --meta takes it:
// etcd://, or etcds:// over TLS; the user and the files of the TLS and
// password options as a query. No password is ever part of it.
func (c Config) MetaURL() string {
	scheme := "etcd://"
	hosts := make([]string, len(c.Endpoints))
	for i, e := range c.Endpoints {
		if h, ok := strings.CutPrefix(e, "https://"); ok {
			scheme, hosts[i] = "etcds://", h
		} else {
			hosts[i] = strings.TrimPrefix(e, "http://")
		}
	}
	user := ""
	if c.User != "" {
		user = url.User(c.User).String() + "@"
	}
	var q []string
	for _, o := range []struct{ name, v string }{{"ca", c.CAFile}, {"cert", c.CertFile}, {"key", c.KeyFile}, {"password-file", c.PasswordFile}} {
		if o.v != "" {
			q = append(q, o.name+"="+url.QueryEscape(o.v))
		}
	}
	query := ""
	if len(q) > 0 {
		query = "?" + strings.Join(q, "&")
	}
	return scheme + user + strings.Join(hosts, ",") + c.Prefix + query
}

// ParseMetaURL parses etcd://HOST:PORT[,HOST:PORT...]/PREFIX into client
// URLs and the prefix ("/PREFIX", without a trailing slash); see
// ParseMeta for the rest of what a --meta URL may say.
func ParseMetaURL(s string) (endpoints []string, prefix string, err error) {
	c, err := ParseMeta(s)
	return c.Endpoints, c.Prefix, err
}

// metaUsage is the shape of a --meta URL.
const metaUsage = "want etcd://[USER@]HOST:PORT[,HOST:PORT...]/PREFIX, or etcds://… for TLS, with options ?ca=FILE&cert=FILE&key=FILE&password-file=FILE"

// ParseMeta parses a --meta URL into the etcd part of a Config:
//
//	etcd[s]://[USER@]HOST:PORT[,HOST:PORT...]/PREFIX[?ca=FILE&cert=FILE&key=FILE&password-file=FILE]
//
// etcds:// talks TLS to every endpoint (https://HOST:PORT), verifying the
// members' certificates with ca= (the system's roots without it) and
// presenting the client certificate cert= with its key= (both or
// neither). USER authenticates with etcd's users and roles; the password
// comes from password-file= (a file only its owner may read) or from
// $ACYCLICFS_ETCD_PASSWORD, never from the URL (it would show in ps and
// shell histories). Files are taken as given; the caller makes them
// absolute.
func ParseMeta(s string) (Config, error) {
	var c Config
	bad := func(why string) error { return fmt.Errorf("%w: --meta %q: %s", ErrBadConfig, redact(s), why) }
	scheme := "http://"
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "etcds://"); !ok {
			return c, bad(metaUsage)
		}
		scheme = "https://"
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if strings.Contains(rest, "#") || strings.Contains(query, "#") {
		return c, bad("no fragment allowed")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		info := hosts[:at]
		hosts = hosts[at+1:]
		if strings.Contains(info, ":") {
			return c, bad("no password in the URL (it would show in ps and shell histories): give it in $ACYCLICFS_ETCD_PASSWORD or a file, ?password-file=FILE")
		}
		u, err := url.PathUnescape(info)
		if err != nil || u == "" {
			return c, bad(fmt.Sprintf("user %q is not a user name", info))
		}
		for _, r := range u {
			if r < 0x20 || r == 0x7f {
				return c, bad("the user name holds a control character")
			}
		}
		c.User = u
	}
	if hosts == "" {
		return c, bad("no HOST:PORT")
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || strings.ContainsAny(host, "@/ ") {
			return c, bad(fmt.Sprintf("%q is not HOST:PORT", h))
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return c, bad(fmt.Sprintf("%q: port must be a number from 1 to 65535", h))
		}
		c.Endpoints = append(c.Endpoints, scheme+net.JoinHostPort(host, port))
	}
	path = strings.TrimRight(path, "/")
	if path == "" {
		return c, bad("PREFIX is empty (etcd://HOST:PORT/PREFIX keeps the store under /PREFIX)")
	}
	for _, r := range path {
		if r < 0x20 || r == 0x7f {
			return c, bad("PREFIX holds a control character")
		}
	}
	c.Prefix = "/" + path
	if hasQuery {
		vals, err := url.ParseQuery(query)
		if err != nil {
			return c, bad(fmt.Sprintf("query: %v", err))
		}
		for k, v := range vals {
			if len(v) != 1 || v[0] == "" {
				return c, bad(fmt.Sprintf("option %s: want one non-empty value", k))
			}
			for _, r := range v[0] {
				if r < 0x20 || r == 0x7f {
					return c, bad(fmt.Sprintf("option %s holds a control character", k))
				}
			}
			switch k {
			case "ca":
				c.CAFile = v[0]
			case "cert":
				c.CertFile = v[0]
			case "key":
				c.KeyFile = v[0]
			case "password-file":
				c.PasswordFile = v[0]
			case "password":
				return c, bad("no password in the URL (it would show in ps and shell histories): give it in $ACYCLICFS_ETCD_PASSWORD or a file, ?password-file=FILE")
			default:
				return c, bad(fmt.Sprintf("unknown option %q (%s)", k, metaUsage))
			}
		}
	}
	if scheme == "http://" && (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") {
		return c, bad("ca=, cert= and key= are TLS options: use etcds://")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return c, bad("cert= and key= go together")
	}
	if c.PasswordFile != "" && c.User == "" {
		return c, bad("password-file= needs a user (etcd://USER@HOST:PORT/PREFIX)")
	}
	return c, nil
}

// redact drops a password from a --meta URL quoted in an error.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	hosts, tail, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(hosts[:at], ":"); hasPass {
			hosts = user + ":xxxxx" + hosts[at:]
		}
	}
	if i := strings.Index(tail, "password="); i >= 0 {
		end := strings.IndexByte(tail[i:], '&')
		if end < 0 {
			end = len(tail) - i
		}
		tail = tail[:i] + "password=xxxxx" + tail[i+end:]
	}
	return scheme + "://" + hosts + "/" + tail
}

// ValidateNode checks a node name: 1-64 bytes of letters, digits, '.', '_'
// and '-', not starting with '.' or '-'.
func ValidateNode(name string) error {
	if name == "" || len(name) > 64 || name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: node name %q: want 1-64 letters, digits, '.', '_' or '-', not starting with '.' or '-'", ErrBadConfig, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: node name %q: want 1-64 letters, digits, '.', '_' or '-', not starting with '.' or '-'", ErrBadConfig, name)
		}
	}
	return nil
}

// DefaultNode derives a node name from the host name and the store
// directory, so that two store directories on one machine are two nodes:
// HOST-XXXXXXXX, the hex of the first 4 bytes of SHA-256 of the absolute
// directory.
func DefaultNode(absDir string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	host, _, _ = strings.Cut(host, ".")
	var b strings.Builder
	for i := 0; i < len(host) && b.Len() < 48; i++ {
		c := host[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		}
	}
	h := strings.TrimLeft(b.String(), "-")
	if h == "" {
		h = "node"
	}
	sum := sha256.Sum256([]byte(filepath.Clean(absDir)))
	return h + "-" + hex.EncodeToString(sum[:4])
}

// Validate checks a configuration as Load and Init do.
func (c Config) Validate() error {
	if c.Version != ConfigVersion {
		return fmt.Errorf("%w: version %d (this build reads version %d)", ErrBadConfig, c.Version, ConfigVersion)
	}
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: no etcd endpoints", ErrBadConfig)
	}
	p, err := ParseMeta(c.MetaURL())
	if err != nil {
		return err
	}
	// What --meta would have written: http:// (or all https://)
	// HOST:PORT endpoints, /PREFIX, absolute files.
	if p.Prefix != c.Prefix || !slices.Equal(p.Endpoints, c.Endpoints) || p.User != c.User {
		return fmt.Errorf("%w: endpoints %q, prefix %q and user %q are not what %s gives", ErrBadConfig, c.Endpoints, c.Prefix, c.User, c.MetaURL())
	}
	for _, f := range []string{c.CAFile, c.CertFile, c.KeyFile, c.PasswordFile} {
		if f != "" && (!filepath.IsAbs(f) || filepath.Clean(f) != f) {
			return fmt.Errorf("%w: %q: the TLS and password files must be clean absolute paths", ErrBadConfig, f)
		}
	}
	if c.ClaimTTLSeconds < 0 {
		return fmt.Errorf("%w: claim_ttl_seconds %d is negative", ErrBadConfig, c.ClaimTTLSeconds)
	}
	if c.Blobs != "" {
		if b, err := ParseBlobs(c.Blobs); err != nil {
			return err
		} else if b != c.Blobs {
			return fmt.Errorf("%w: blobs %q is not a clean absolute path or a canonical s3:// spec", ErrBadConfig, c.Blobs)
		}
	}
	if c.CacheBytes < 0 || (c.CacheBytes > 0 && c.Blobs == "") {
		return fmt.Errorf("%w: cache_bytes %d: must be 0, or positive with blobs", ErrBadConfig, c.CacheBytes)
	}
	return ValidateNode(c.Node)
}

// Load reads dir's cluster.json; found is false (and the error nil) for a
// directory without one (a local store).
func Load(dir string) (cfg Config, found bool, err error) {
	p := filepath.Join(dir, ConfigName)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, false, nil
	}
	if err != nil {
		return cfg, false, fmt.Errorf("read %s: %w", p, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, true, fmt.Errorf("%s: %w: %w", p, ErrBadConfig, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, true, fmt.Errorf("%s: %w", p, err)
	}
	return cfg, true, nil
}

// Same reports whether two configurations describe the same node of the
// same store.
func (c Config) Same(o Config) bool {
	if c.Prefix != o.Prefix || c.Node != o.Node || c.ClaimTTL() != o.ClaimTTL() || len(c.Endpoints) != len(o.Endpoints) ||
		c.Blobs != o.Blobs || c.CacheBytes != o.CacheBytes || c.CAFile != o.CAFile || c.CertFile != o.CertFile ||
		c.KeyFile != o.KeyFile || c.User != o.User || c.PasswordFile != o.PasswordFile {
		return false
	}
	for i := range c.Endpoints {
		if c.Endpoints[i] != o.Endpoints[i] {
			return false
		}
	}
	return true
}

// Check says whether cfg may be written into dir: fresh when dir has no
// cluster.json; nil and not fresh when it has this very configuration;
// ErrConfigDiffers when it has another one, or is a local store (it has a
// meta.db of its own).
func Check(dir string, cfg Config) (fresh bool, err error) {
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	old, found, err := Load(dir)
	if err != nil {
		return false, err
	}
	if found {
		if old.Same(cfg) {
			return false, nil
		}
		return false, fmt.Errorf("%w: %s is node %s of %s%s, not node %s of %s%s", ErrConfigDiffers, dir, old.Node, old.MetaURL(), old.blobsNote(), cfg.Node, cfg.MetaURL(), cfg.blobsNote())
	}
	if _, err := os.Stat(filepath.Join(dir, "meta.db")); err == nil {
		return false, fmt.Errorf("%w: %s is a local store (it has a meta.db); a cluster node starts from a new directory", ErrConfigDiffers, dir)
	}
	return true, nil
}

// Write writes cfg as dir's cluster.json (mode 0600, atomically, synced)
// after Check; a directory with the same configuration is left as it is
// (created false).
func Write(dir string, cfg Config) (created bool, err error) {
	fresh, err := Check(dir, cfg)
	if err != nil || !fresh {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return false, err
	}
	p := filepath.Join(dir, ConfigName)
	if err := writeAtomic(p, append(b, '\n')); err != nil {
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	return true, nil
}

// writeAtomic writes a new file at p (mode 0600) through a synced temporary
// file renamed over it, then syncs the directory.
func writeAtomic(p string, data []byte) error {
	f, err := osfile.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".new-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return osfile.Sync(filepath.Dir(p))
}

// Remove removes dir's cluster.json (init undoing a configuration it
// wrote when the store could not be opened through it).
func Remove(dir string) error {
	if err := os.Remove(filepath.Join(dir, ConfigName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
