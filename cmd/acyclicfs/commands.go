package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/acyclicfs/acyclicfs/cluster"
	"github.com/acyclicfs/acyclicfs/internal/dirfd"
	"github.com/acyclicfs/acyclicfs/rebase"
	"github.com/acyclicfs/acyclicfs/store"
	"github.com/acyclicfs/acyclicfs/workspace"
)

func (a *app) cmdInit() *cobra.Command {
	var fl initFlags
	c := &cobra.Command{
		Use:   "init [STORE] [--meta etcd://HOST:PORT[,HOST:PORT...]/PREFIX [--blobs DIR [--cache-size N]] [--node NAME] [--claim-ttl DUR]]",
		Short: "Create the store if absent (idempotent); with --meta, a node of a store on etcd",
		Long: `Create the store if absent (idempotent).

STORE is the store directory (as --store gives it). With --meta the
directory becomes a node of a store whose metadata lives in etcd under
PREFIX: init writes STORE/cluster.json and every later command on STORE
reads it. Several store directories (on one machine or many) inited
against one etcd prefix are the nodes of one store; each keeps its own
mounts' upper files and core state. --blobs DIR keeps every node's blobs
in one shared directory (NFS and the like; give every node the same), and
--blobs 's3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&insecure=1][&region=R]'
in an S3 bucket (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
and AWS_SESSION_TOKEN; init makes the bucket if it is missing); the
node's objects/ is then a cache bounded by --cache-size (bytes, or with a
K, M, G or T suffix; default unbounded). Without --blobs a file's content
stays on the node that stored it. --node names this node (default the host name and a hash
of the store path); --claim-ttl is how long a dead or stopped node keeps
its mounts' claims (default 10s, whole seconds). Running init again with
the same configuration changes nothing (flags left out keep their values);
with another one, or --meta on a local store, it is refused.`,
		Args: rangeArgs(0, 1, "[STORE]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Init alone makes a node's store in etcd when its prefix
			// holds none (other commands say it is missing).
			a.initing = true
			if len(args) == 1 {
				if err := pathArg("init: STORE", args[0]); err != nil {
					return err
				}
				if a.storeFlag != "" && a.abs(a.storeFlag) != a.abs(args[0]) {
					return usageError{fmt.Errorf("init: STORE %s and --store %s differ", args[0], a.storeFlag)}
				}
				a.storeFlag = args[0]
			}
			f := cmd.Flags()
			if fl.meta == "" {
				for _, n := range []string{"blobs", "cache-size", "node", "claim-ttl"} {
					if f.Changed(n) {
						return usageError{fmt.Errorf("init: --%s needs --meta etcd://HOST:PORT/PREFIX", n)}
					}
				}
			} else if err := a.initNode(fl, f.Changed("claim-ttl")); err != nil {
				return fmt.Errorf("init: %w", err)
			}
			m, err := a.manager()
			if err != nil {
				return fmt.Errorf("init store: %w", err)
			}
			out := initJSON{Store: m.Dir()}
			if n := m.Node(); n != nil {
				out.Node, out.Meta, out.Blobs = n.Name(), n.Config().MetaURL(), n.Config().Blobs
			}
			return a.emit(out, func(w io.Writer) {
				if out.Node != "" {
					blobs := ""
					if out.Blobs != "" {
						blobs = ", blobs in " + out.Blobs
					}
					fmt.Fprintf(w, "%s (node %s of %s%s)\n", out.Store, out.Node, out.Meta, blobs)
					return
				}
				fmt.Fprintln(w, out.Store)
			})
		},
	}
	c.Flags().StringVar(&fl.meta, "meta", "", "keep the metadata in etcd: etcd[s]://[USER@]HOST:PORT[,HOST:PORT...]/PREFIX[?ca=FILE&cert=FILE&key=FILE&password-file=FILE]")
	c.Flags().StringVar(&fl.blobs, "blobs", "", "keep every node's blobs in this shared directory or S3 bucket (s3://BUCKET[/PREFIX]?endpoint=HOST:PORT)")
	c.Flags().StringVar(&fl.cacheSize, "cache-size", "", "with --blobs, bound this node's objects/ cache (bytes, or N[K|M|G|T])")
	c.Flags().StringVar(&fl.node, "node", "", "this node's name (default HOST-HASH of the store path)")
	c.Flags().DurationVar(&fl.claimTTL, "claim-ttl", cluster.DefaultClaimTTL, "how long a dead node keeps its claims")
	return c
}

type initJSON struct {
	Store string `json:"store"`
	Node  string `json:"node,omitempty"`
	Meta  string `json:"meta,omitempty"`
	Blobs string `json:"blobs,omitempty"`
}

// initNode makes the store directory a node of the store on etcd that
// metaURL names: it validates everything, checks that etcd answers and
// writes cluster.json. A directory that is already this node is left as
// it is; one configured otherwise, or a local store, is refused.
// initFlags are init's flags for a node.
type initFlags struct {
	meta, blobs, cacheSize, node string
	claimTTL                     time.Duration
}

// parseSize reads a byte count: digits, optionally followed by K, M, G or
// T (powers of 1024).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 || v > (1<<62)/mult {
		return 0, fmt.Errorf("not a positive size (bytes, or N with a K, M, G or T suffix)")
	}
	return v * mult, nil
}

func (a *app) initNode(fl initFlags, ttlGiven bool) error {
	if a.mgr != nil && a.mgr.Node() == nil {
		// In the daemon of a local store.
		return fmt.Errorf("%w: %s is a local store (served by its daemon); a cluster node starts from a new directory", cluster.ErrConfigDiffers, a.mgr.Dir())
	}
	dir, err := a.storeDir()
	if err != nil {
		return err
	}
	if err := workspace.CheckStoreDir(dir); err != nil {
		return err
	}
	cfg, err := cluster.ParseMeta(fl.meta)
	if err != nil {
		return err
	}
	cfg.Version, cfg.Node = cluster.ConfigVersion, fl.node
	// The TLS and password files as cluster.json keeps them: absolute.
	for _, f := range []*string{&cfg.CAFile, &cfg.CertFile, &cfg.KeyFile, &cfg.PasswordFile} {
		if *f != "" {
			*f = a.abs(*f)
		}
	}
	// "init --meta URL" again keeps what it does not say: the node's name,
	// claim TTL, blobs and cache size.
	old, found, err := cluster.Load(dir)
	if err != nil {
		return err
	}
	if found {
		cfg.ClaimTTLSeconds, cfg.Blobs, cfg.CacheBytes = old.ClaimTTLSeconds, old.Blobs, old.CacheBytes
	}
	if fl.node == "" {
		cfg.Node = cluster.DefaultNode(dir)
		if found {
			cfg.Node = old.Node
		}
	}
	if ttlGiven {
		if fl.claimTTL < time.Second || fl.claimTTL%time.Second != 0 {
			return usageError{fmt.Errorf("--claim-ttl %v: want whole seconds, at least 1s", fl.claimTTL)}
		}
		cfg.ClaimTTLSeconds = int(fl.claimTTL / time.Second)
	}
	if fl.blobs != "" {
		b := fl.blobs
		if !strings.Contains(b, "://") {
			b = a.abs(b)
		}
		if cfg.Blobs, err = cluster.ParseBlobs(b); err != nil {
			return err
		}
		if !strings.HasPrefix(cfg.Blobs, "s3://") && (filepath.Clean(cfg.Blobs) == dir || dirfd.Within(cfg.Blobs, dir) || dirfd.Within(dir, cfg.Blobs)) {
			return usageError{fmt.Errorf("--blobs %s: the shared directory must be outside the store %s, and the store outside it", cfg.Blobs, dir)}
		}
	}
	if fl.cacheSize != "" {
		if cfg.Blobs == "" {
			return usageError{fmt.Errorf("--cache-size needs --blobs: without a shared blob plane, objects/ is the only copy")}
		}
		if cfg.CacheBytes, err = parseSize(fl.cacheSize); err != nil {
			return usageError{fmt.Errorf("--cache-size %q: %w", fl.cacheSize, err)}
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if a.mgr != nil { // in the daemon: the node is open, with its config
		if have := a.mgr.Node().Config(); !have.Same(cfg) {
			return fmt.Errorf("%w: %s is node %s of %s", cluster.ErrConfigDiffers, a.mgr.Dir(), have.Node, have.MetaURL())
		}
		return nil
	}
	fresh, err := cluster.Check(dir, cfg)
	if err != nil || !fresh {
		return err
	}
	// Before anything is written: etcd must answer.
	c, err := cluster.Dial(context.Background(), cfg)
	if err != nil {
		return err
	}
	c.Close()
	// And the blob plane: an S3 bucket that does not exist yet is made.
	if _, err := cluster.OpenBlobs(context.Background(), dir, cfg, true); err != nil {
		return err
	}
	_, statErr := os.Stat(dir)
	if _, err := cluster.Write(dir, cfg); err != nil {
		return err
	}
	// Open the store through the new configuration now, so that a failure
	// leaves nothing written: the directory goes if init made it.
	m, err := a.manager()
	if err != nil {
		if errors.Is(statErr, fs.ErrNotExist) {
			_ = os.RemoveAll(dir)
		} else {
			_ = cluster.Remove(dir)
		}
		return err
	}
	_ = m // kept open for the rest of init
	return nil
}

type importJSON struct {
	Workspace string   `json:"workspace"`
	Head      store.ID `json:"head"`
	Files     int      `json:"files"`
	Hashed    int      `json:"hashed"`
	Bytes     int64    `json:"bytes"`
	Skipped   int      `json:"skipped"`
}

func (a *app) cmdCreate() *cobra.Command {
	var from, inPlace, fromGit string
	var resolve bool
	c := &cobra.Command{
		Use:   "create NAME [--from DIR | --in-place DIR | --from-git REPO[@REF] [--resolve]]",
		Short: "Create a root workspace, empty, importing DIR, over DIR in place, or from a git branch",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, f := range []string{"from", "in-place", "from-git"} {
				if cmd.Flags().Changed(f) && cmd.Flags().Lookup(f).Value.String() == "" {
					return usageError{fmt.Errorf("create: --%s needs a directory", f)}
				}
			}
			if n := btoi(from != "") + btoi(inPlace != "") + btoi(fromGit != ""); n > 1 {
				return usageError{fmt.Errorf("create: --from, --in-place and --from-git exclude each other")}
			}
			if resolve && fromGit == "" {
				return usageError{fmt.Errorf("create: --resolve goes with --from-git")}
			}
			if fromGit != "" {
				return a.createFromGit(cmd, args[0], fromGit, resolve)
			}
			if inPlace != "" {
				if from != "" {
					return usageError{fmt.Errorf("create: --from and --in-place exclude each other")}
				}
				m, err := a.manager()
				if err != nil {
					return err
				}
				if err := a.safeTarget("in-place directory", a.mountpath(inPlace), false, true); err != nil {
					return err
				}
				gen, err := m.CreateInPlace(args[0], a.mountpath(inPlace))
				if err != nil {
					return fmt.Errorf("create %s: %w", args[0], err)
				}
				return a.emit(map[string]any{"workspace": args[0], "generation": gen, "in_place": a.mountpath(inPlace)},
					func(w io.Writer) { fmt.Fprintln(w, gen) })
			}
			if from != "" {
				from = a.abs(from)
				if err := a.importSource(from); err != nil {
					return err
				}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			gen, st, err := m.Create(cmd.Context(), args[0], from)
			if err != nil {
				return fmt.Errorf("create %s: %w", args[0], err)
			}
			a.info("imported %d files (%d bytes), skipped %d", st.Files, st.Bytes, st.Skipped)
			return a.emit(importJSON{args[0], gen, st.Files, st.Hashed, st.Bytes, st.Skipped}, func(w io.Writer) { fmt.Fprintln(w, gen) })
		},
	}
	c.Flags().StringVar(&from, "from", "", "import this directory's tree")
	c.Flags().StringVar(&inPlace, "in-place", "", "workspace over a real directory, read lazily")
	c.Flags().StringVar(&fromGit, "from-git", "", "start from REF's tree (default HEAD) of the git repository REPO, bound to its branch")
	c.Flags().BoolVar(&resolve, "resolve", false, "with --from-git: store every file's content before returning instead of in the background after the mount")
	return c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gitImportJSON is `create --from-git --json`.
type gitImportJSON struct {
	Workspace string   `json:"workspace"`
	Head      store.ID `json:"head"`
	Repo      string   `json:"repo"`
	Branch    string   `json:"branch"`
	Commit    string   `json:"commit"`
	Files     int      `json:"files"`
	Blobs     int      `json:"blobs"`
	Bytes     int64    `json:"bytes"`
	// Resolved: the git object references --resolve stored.
	Resolved int `json:"resolved"`
}

// createFromGit is `create NAME --from-git REPO[@REF]`. REPO is taken
// whole when it is a directory (a path may hold '@'); otherwise the text
// after the last '@' is the revision.
func (a *app) createFromGit(cmd *cobra.Command, name, spec string, resolve bool) error {
	repo, rev := spec, ""
	if fi, err := os.Stat(a.abs(spec)); err != nil || !fi.IsDir() {
		if i := strings.LastIndexByte(spec, '@'); i > 0 {
			repo, rev = spec[:i], spec[i+1:]
			if rev == "" {
				return usageError{fmt.Errorf("create: --from-git %q: empty revision after '@'", spec)}
			}
		}
	}
	m, err := a.manager()
	if err != nil {
		return err
	}
	res, err := m.CreateFromGit(cmd.Context(), name, a.abs(repo), rev, workspace.GitImportOptions{Resolve: resolve})
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	branch := strings.TrimPrefix(res.Branch, "refs/heads/")
	if branch == "" {
		a.info("imported %d files (%d blobs, %d bytes) of %s at %.12s (detached: no branch to publish to)", res.Files, res.Blobs, res.Bytes, res.GitDir, res.Commit)
	} else {
		a.info("imported %d files (%d blobs, %d bytes) of %s at %.12s, bound to branch %s", res.Files, res.Blobs, res.Bytes, res.GitDir, res.Commit, branch)
	}
	return a.emit(gitImportJSON{name, res.Gen, res.GitDir, branch, res.Commit, res.Files, res.Blobs, res.Bytes, res.Resolved},
		func(w io.Writer) { fmt.Fprintln(w, res.Gen) })
}

func (a *app) cmdFork() *cobra.Command {
	var at string
	c := &cobra.Command{
		Use:   "fork PARENT CHILD [--at GEN]",
		Short: "Fork CHILD from PARENT's head (or GEN) in O(1)",
		Args:  exactArgs(2, "PARENT CHILD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			gen, err := m.Fork(args[0], args[1], at)
			if err != nil {
				return fmt.Errorf("fork %s %s: %w", args[0], args[1], err)
			}
			return a.emit(map[string]any{"workspace": args[1], "parent": args[0], "head": gen}, func(w io.Writer) { fmt.Fprintln(w, gen) })
		},
	}
	c.Flags().StringVar(&at, "at", "", "fork at this generation of PARENT (id or unique prefix)")
	return c
}

func (a *app) cmdCommit() *cobra.Command {
	return &cobra.Command{
		Use:   "commit NAME DIR",
		Short: "Snapshot DIR as NAME's next generation",
		Args:  exactArgs(2, "NAME DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// An empty DIR (an unset variable) would snapshot the working
			// directory as NAME's content.
			if err := pathArg("commit: DIR", args[1]); err != nil {
				return err
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			gen, st, err := m.Commit(cmd.Context(), args[0], a.abs(args[1]))
			if err != nil {
				return fmt.Errorf("commit %s: %w", args[0], err)
			}
			a.info("scanned %d files, read %d (%d bytes)", st.Files, st.Hashed, st.Bytes)
			return a.emit(importJSON{args[0], gen, st.Files, st.Hashed, st.Bytes, st.Skipped}, func(w io.Writer) { fmt.Fprintln(w, gen) })
		},
	}
}

// listRow is one workspace in `list`.
type listRow struct {
	Name       string   `json:"name"`
	Parent     string   `json:"parent"`
	Head       store.ID `json:"head"`
	Base       store.ID `json:"base"`
	State      string   `json:"state"`
	Mountpoint string   `json:"mountpoint"`
	// Node is the node mounting the workspace, on a store on etcd.
	Node string `json:"node,omitempty"`
}

// claims returns every node's claims by workspace, for a store on etcd
// (empty for a local store), and this node's name.
func claims(ctx context.Context, m *workspace.Manager) (map[string]cluster.Claim, string, error) {
	out := map[string]cluster.Claim{}
	n := m.Node()
	if n == nil {
		return out, "", nil
	}
	cl, err := n.List(ctx)
	if err != nil {
		return nil, "", err
	}
	for _, c := range cl {
		out[c.Workspace] = c
	}
	return out, n.Name(), nil
}

// claimedState is a workspace's state and mountpoint (workspaceState's)
// with its claim: one another node holds makes an idle workspace mounted
// there.
func claimedState(state, mountpoint, self string, c cluster.Claim, ok bool) (string, string, string) {
	if !ok {
		return state, mountpoint, ""
	}
	if c.Node != self {
		state, mountpoint = strings.Replace(state, "idle", "mounted", 1), c.Mountpoint
	}
	return state, mountpoint, c.Node
}

func (a *app) workspaceState(m *workspace.Manager, w store.Workspace) (state, mountpoint string) {
	state = "idle"
	if rec, ok, err := m.MountRecord(w.Name); err == nil && ok {
		state, mountpoint = "mounted", rec.Mountpoint
		if a.d != nil && a.d.Active(w.Name) {
			state = "active"
		} else if a.d == nil || !a.d.Serving(w.Name) {
			state = "recovering"
		}
	}
	if cs, err := m.Conflicts(w.Name); err == nil && len(cs) > 0 {
		state += ",conflicted"
	}
	return state, mountpoint
}

func (a *app) cmdList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every workspace",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			ws, err := m.List()
			if err != nil {
				return fmt.Errorf("list: %w", err)
			}
			held, self, err := claims(cmd.Context(), m)
			if err != nil {
				return fmt.Errorf("list: %w", err)
			}
			rows := make([]listRow, 0, len(ws))
			for _, w := range ws {
				st, mp := a.workspaceState(m, w)
				c, ok := held[w.Name]
				st, mp, node := claimedState(st, mp, self, c, ok)
				rows = append(rows, listRow{w.Name, w.Parent, w.Head, w.Base, st, mp, node})
			}
			return a.emit(rows, func(out io.Writer) {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tPARENT\tHEAD\tBASE\tSTATE\tMOUNTPOINT")
				for _, r := range rows {
					mp := dash(r.Mountpoint)
					if r.Node != "" {
						mp = r.Node + ":" + mp
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, dash(r.Parent), short(r.Head), short(r.Base), r.State, mp)
				}
				tw.Flush()
			})
		},
	}
}

// quotePath keeps text output at one line per path: a path holding a
// control character (a newline, a tab), bytes that are not UTF-8, or
// starting with a double quote is printed as a Go/C-style quoted string
// ("new\nline", "bad\xff"); every other path as it is.
func quotePath(p string) string {
	if strings.HasPrefix(p, `"`) || !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(p)
	}
	return p
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(id store.ID) string {
	if id.IsZero() {
		return "-"
	}
	return id.Short()
}

func fmtTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func (a *app) cmdLog() *cobra.Command {
	var n int
	var paths bool
	c := &cobra.Command{
		Use:   "log NAME [-n N] [--paths]",
		Short: "Show NAME's head history, newest first",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 0 {
				return usageError{fmt.Errorf("log: -n must be >= 0")}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			if paths {
				entries, err := m.LogPaths(args[0], n)
				if err != nil {
					return fmt.Errorf("log %s: %w", args[0], err)
				}
				return a.emit(entries, func(w io.Writer) {
					for _, e := range entries {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Gen, e.Kind, fmtTime(e.Time), e.Operation)
						for _, p := range e.Paths {
							fmt.Fprintf(w, "\t%s\n", p)
						}
					}
				})
			}
			entries, err := m.Log(args[0], n)
			if err != nil {
				return fmt.Errorf("log %s: %w", args[0], err)
			}
			return a.emit(entries, func(w io.Writer) {
				for _, e := range entries {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Gen, e.Kind, fmtTime(e.Time), e.Operation)
				}
			})
		},
	}
	c.Flags().IntVarP(&n, "number", "n", 0, "show at most N entries (0: all)")
	c.Flags().BoolVar(&paths, "paths", false, "list the paths each entry changed")
	return c
}

type changeJSON struct {
	Status string `json:"status"`
	Path   string `json:"path"`
}

func (a *app) cmdDiff() *cobra.Command {
	var stat bool
	c := &cobra.Command{
		Use:   "diff NAME [OTHER] [--stat]",
		Short: "Show NAME's changes against its base, or against OTHER",
		Args:  rangeArgs(1, 2, "NAME [OTHER]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			other := ""
			if len(args) == 2 {
				other = args[1]
			}
			from, to, err := m.DiffRefs(args[0], other)
			if err != nil {
				return fmt.Errorf("diff %s: %w", strings.Join(args, " "), err)
			}
			changes, err := m.Diff(from, to)
			if err != nil {
				return fmt.Errorf("diff %s: %w", strings.Join(args, " "), err)
			}
			if a.jsonOut {
				out := make([]changeJSON, 0, len(changes))
				for _, c := range changes {
					out = append(out, changeJSON{string(rune(c.Kind)), c.Path})
				}
				return a.emit(out, nil)
			}
			if stat {
				for _, c := range changes {
					fmt.Fprintf(a.stdout, "%c\t%s\n", c.Kind, quotePath(c.Path))
				}
				return nil
			}
			return m.WriteUnified(a.stdout, changes)
		},
	}
	c.Flags().BoolVar(&stat, "stat", false, "one line per changed path: A, M, D or T, a tab, the path")
	return c
}

func (a *app) cmdExport() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "export NAME[@GEN] DIR [--force]",
		Short: "Write a workspace's tree into a real directory (journaled)",
		Args:  exactArgs(2, "NAME[@GEN] DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pathArg("export: DIR", args[1]); err != nil {
				return err
			}
			// --force replaces what DIR holds: never the working
			// directory, $HOME, / or a store (nor what holds them).
			if err := a.safeTarget("export target", a.abs(args[1]), force, force); err != nil {
				return err
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			ref := args[0]
			if !strings.Contains(ref, "@") {
				if _, err := m.Get(ref); err != nil {
					return fmt.Errorf("export %s: %w", ref, err)
				}
			}
			gen, err := m.ResolveRef(ref)
			if err != nil {
				return fmt.Errorf("export %s: %w", ref, err)
			}
			n, err := m.Export(cmd.Context(), gen, a.abs(args[1]), force)
			if err != nil {
				return fmt.Errorf("export %s: %w", ref, err)
			}
			return a.emit(map[string]any{"generation": gen, "files": n, "dir": a.abs(args[1])}, func(w io.Writer) { fmt.Fprintln(w, n) })
		},
	}
	c.Flags().BoolVar(&force, "force", false, "replace the contents of a non-empty DIR")
	return c
}

func parsePrefer(s string) (rebase.Prefer, error) {
	switch s {
	case "":
		return rebase.PreferNone, nil
	case "ours":
		return rebase.PreferOurs, nil
	case "theirs":
		return rebase.PreferTheirs, nil
	}
	return 0, usageError{fmt.Errorf("--prefer must be ours or theirs, not %q", s)}
}

// printOutcome prints a reconcile outcome as SPEC.md describes it and
// returns errConflictExit for a conflict.
func (a *app) printOutcome(w io.Writer, res workspace.Result) error {
	if a.jsonOut {
		if err := a.emit(res, nil); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, res.Outcome)
		for _, c := range res.Conflicts {
			fmt.Fprintln(w, quotePath(c.Path))
		}
	}
	if res.Outcome == workspace.OutcomeConflicted {
		if !a.jsonOut && !a.quiet {
			fmt.Fprintln(a.stderr, conflictHint)
		}
		return errConflictExit
	}
	return nil
}

func (a *app) cmdRebase() *cobra.Command {
	var prefer string
	var markers bool
	c := &cobra.Command{
		Use:   "rebase NAME [--prefer ours|theirs] [--markers]",
		Short: "Rebase NAME onto its parent's head now",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePrefer(prefer)
			if err != nil {
				return err
			}
			if markers && p != rebase.PreferNone {
				return usageError{fmt.Errorf("rebase: --markers and --prefer exclude each other")}
			}
			m, err := a.manager()
			if err != nil {
				return err
			}
			if a.d != nil {
				if err := a.d.RefuseIfActive(args[0]); err != nil {
					return fmt.Errorf("rebase %s: %w", args[0], err)
				}
			}
			res, err := m.Rebase(cmd.Context(), args[0], workspace.RebaseOptions{Prefer: p, Markers: markers})
			if err != nil {
				return fmt.Errorf("rebase %s: %w", args[0], err)
			}
			if a.d != nil {
				a.d.HeadMoved(args[0])
			}
			return a.printOutcome(a.stdout, res)
		},
	}
	c.Flags().StringVar(&prefer, "prefer", "", "resolve every conflict by taking ours or theirs")
	c.Flags().BoolVar(&markers, "markers", false, "write diff3-style conflict markers into text files")
	return c
}

func (a *app) cmdLand() *cobra.Command {
	c := &cobra.Command{
		Use:   "land NAME",
		Short: "Publish NAME's changes into its parent (rebasing first if needed)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			if a.d != nil {
				if err := a.d.RefuseIfActive(args[0]); err != nil {
					return fmt.Errorf("land %s: %w", args[0], err)
				}
			}
			res, err := m.Land(cmd.Context(), args[0], workspace.RebaseOptions{})
			if err != nil {
				return fmt.Errorf("land %s: %w", args[0], err)
			}
			if a.d != nil {
				a.d.HeadMoved(args[0])
				a.d.HeadMoved(res.Parent)
			}
			if res.Outcome == workspace.OutcomeConflicted {
				return a.printOutcome(a.stdout, res)
			}
			pub := a.publishAfterLand(cmd.Context(), res.Parent)
			if pub == nil {
				return a.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.Head) })
			}
			if pub.Error != "" && !a.quiet {
				fmt.Fprintf(a.stderr, "warning: landed; publishing %s (its binding's on-land) failed: %s\n", res.Parent, pub.Error)
			}
			return a.emit(struct {
				workspace.Result
				Publish *landPublish `json:"publish"`
			}{res, pub}, func(w io.Writer) {
				fmt.Fprintln(w, res.Head)
				if pub.Published != nil {
					fmt.Fprintln(w, publishLine(*pub.Published))
				}
			})
		},
	}
	return c
}

func (a *app) cmdUndo() *cobra.Command {
	return &cobra.Command{
		Use:   "undo NAME",
		Short: "Make NAME's previous head current again (a new history entry)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			gen, err := m.Undo(args[0])
			if err != nil {
				return fmt.Errorf("undo %s: %w", args[0], err)
			}
			return a.emit(map[string]any{"workspace": args[0], "head": gen}, func(w io.Writer) { fmt.Fprintln(w, gen) })
		},
	}
}

func (a *app) cmdRm() *cobra.Command {
	var recursive bool
	c := &cobra.Command{
		Use:   "rm NAME [--recursive]",
		Short: "Delete a workspace",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			removed, err := m.Remove(args[0], recursive)
			if err != nil {
				return fmt.Errorf("rm %s: %w", args[0], err)
			}
			if a.jsonOut {
				return a.emit(map[string]any{"removed": removed}, nil)
			}
			for _, r := range removed {
				a.info("removed %s", r)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "also delete every descendant")
	return c
}

func (a *app) cmdGC() *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Delete objects no workspace or journal reaches",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			// In the daemon, the request handler holds gcMu exclusively.
			// The mounts it serves give back the space of deleted files
			// their last snapshot still named (upper-trash) first.
			var freed int64
			if a.d != nil {
				n, err := a.d.FreeScratch()
				freed += n
				if err != nil {
					return fmt.Errorf("gc: %w", err)
				}
			}
			n, err := m.GC()
			freed += n
			if err != nil {
				return fmt.Errorf("gc: %w", err)
			}
			return a.emit(map[string]int64{"freed_bytes": freed}, func(w io.Writer) { fmt.Fprintln(w, freed) })
		},
	}
}

func (a *app) cmdFsck() *cobra.Command {
	return &cobra.Command{
		Use:   "fsck",
		Short: "Verify every object's address, every reference, every journal",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager()
			if err != nil {
				return err
			}
			probs, err := m.Fsck()
			if err != nil {
				return fmt.Errorf("fsck: %w", err)
			}
			if probs == nil {
				probs = []string{} // --json: an empty list, not null
			}
			if err := a.emit(map[string]any{"problems": probs, "clean": len(probs) == 0}, func(w io.Writer) {
				for _, p := range probs {
					fmt.Fprintln(w, p)
				}
				if len(probs) == 0 && !a.quiet {
					fmt.Fprintln(w, "clean")
				}
			}); err != nil {
				return err
			}
			if len(probs) > 0 {
				return errSilent1
			}
			return nil
		},
	}
}
