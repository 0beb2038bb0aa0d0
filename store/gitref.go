package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/acyclicfs/acyclicfs/internal/gitrepo"
	"github.com/acyclicfs/acyclicfs/meta"
)

// Git object references: a base reference whose base is a git repository
// and whose content is one of its blobs, by object name (BaseRef.Git).
// `create --from-git` names every file of the imported tree so instead of
// inflating, hashing and storing it; reads go through viaRefs like every
// base ref's, and take the content from the repository (checked against
// the object name) until the ref is resolved (Resolve) to a stored blob.
// Everything else that knows base refs (PutTrees persisting memoized
// refs, GC keeping refs, their bases and resolutions, check) knows these.

// GitBase returns the base of git object references (GitRef) of the
// repository whose common git directory is gitDir (absolute): the one
// registered already, so that references to the same blob of the same
// repository have the same ID across imports, or a new registration.
// Hold HoldGC until a tree naming a ref of it is reachable (GC sweeps a
// base no reachable reference needs).
func (s *Store) GitBase(gitDir string) (ID, error) {
	var base ID
	if !filepath.IsAbs(gitDir) {
		return base, fmt.Errorf("git base %q: %w: not an absolute path", gitDir, ErrInvalidName)
	}
	gitDir = filepath.Clean(gitDir)
	err := s.update(func(tx *stx) error {
		found := false
		err := tx.Scan(prefixBases, meta.ScanOptions{}, func(mk meta.Key, v []byte) error {
			var rec baseRecord
			if k := spaceBases.Leaf(mk); len(k) == IDSize && json.Unmarshal(v, &rec) == nil && rec.Git && rec.Dir == gitDir {
				copy(base[:], k)
				found = true
				return errStopScan
			}
			return nil
		})
		if found {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := rand.Read(base[:]); err != nil {
			return err
		}
		rec, err := json.Marshal(baseRecord{Dir: gitDir, Created: s.clock(), Git: true})
		if err != nil {
			return err
		}
		return tx.put(prefixBases, base[:], rec)
	})
	if err != nil {
		return ID{}, fmt.Errorf("git base %s: %w", gitDir, err)
	}
	return base, nil
}

// errStopScan ends GitBase's scan at the first match.
var errStopScan = errors.New("stop scan")

// GitRef returns the ID of the reference to blob oid (40 lowercase hex
// digits) of size bytes in git base (GitBase), shown as kind (a
// file, executable or symlink). The reference is memoized in this process
// and persisted by the PutTrees that stores a tree naming it.
func (s *Store) GitRef(base ID, oid string, kind Kind, size int64) (ID, error) {
	r := BaseRef{Base: base, Kind: kind, Size: size, Git: oid}
	enc, err := r.Encode()
	if err != nil {
		return ID{}, err
	}
	id := BaseRefID(enc)
	s.bases.addRef(id, r)
	return id, nil
}

// gitRefMissing describes a git object reference the repository cannot
// serve. It wraps ErrBaseChanged: the content the reference named is gone
// from its base, as for a base file that changed with no resolution.
func gitRefMissing(id ID, r BaseRef, dir string, err error) error {
	return fmt.Errorf("git object ref %s (blob %s of %s): %w: %w", id.Short(), r.Git, dir, ErrBaseChanged, err)
}

// readGitRef returns the content of unresolved git object reference r,
// through its base's long-lived reader (gitReader).
func (s *Store) readGitRef(id ID, r BaseRef) ([]byte, error) {
	rd, dir, err := s.gitReader(r.Base)
	if err != nil {
		return nil, fmt.Errorf("git object ref %s: %w", id.Short(), err)
	}
	s.baseReads.Add(1)
	b, err := rd.Read(r.Git, r.Size)
	if err != nil {
		return nil, gitRefMissing(id, r, dir, err)
	}
	return b, nil
}

// gitReader returns the blob reader of git base base, made on first use
// and ended by Close.
func (s *Store) gitReader(base ID) (*gitrepo.BlobReader, string, error) {
	dir, err := s.BaseDirPath(base)
	if err != nil {
		return nil, "", err
	}
	s.bases.mu.Lock()
	defer s.bases.mu.Unlock()
	if rd, ok := s.bases.gitReaders[base]; ok {
		return rd, dir, nil
	}
	repo, err := gitrepo.At(dir)
	if err != nil {
		return nil, "", err
	}
	if s.bases.gitReaders == nil {
		s.bases.gitReaders = map[ID]*gitrepo.BlobReader{}
	}
	rd := repo.NewBlobReader()
	s.bases.gitReaders[base] = rd
	return rd, dir, nil
}

// closeGitReaders ends every git base's reader process.
func (s *Store) closeGitReaders() {
	s.bases.mu.Lock()
	defer s.bases.mu.Unlock()
	for _, rd := range s.bases.gitReaders {
		rd.Close()
	}
	clear(s.bases.gitReaders)
}

// gitOpen, gitFile: the unresolvedRef reads of a git object reference.
func (s *Store) gitOpen(id ID, r BaseRef) (io.ReadCloser, error) {
	b, err := s.readGitRef(id, r)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *Store) gitFile(id ID, r BaseRef) (*os.File, error) {
	b, err := s.readGitRef(id, r)
	if err != nil {
		return nil, err
	}
	return memfdWith("acyclicfs-git", b)
}

// HasRemote reports whether the store's blobs live on a remote (a node
// with --blobs): what other nodes read must be an object there, never a
// reference to this machine's files.
func (s *Store) HasRemote() bool { return s.tier != nil }

// checkGitRefs asks each git base's repository whether it still holds the
// objects of refs (by base; one `cat-file --batch-check` per repository)
// and reports those it lacks. A repository that is gone altogether is
// one problem per reference too.
func (s *Store) checkGitRefs(refs map[ID]map[ID]BaseRef) ([]Problem, error) {
	var out []Problem
	for base, byID := range refs {
		dir, err := s.BaseDirPath(base)
		if err != nil {
			return nil, err
		}
		oids := make([]string, 0, len(byID))
		for _, r := range byID {
			oids = append(oids, r.Git)
		}
		missing := map[string]bool{}
		repo, err := gitrepo.At(dir)
		if err == nil {
			var lacks []string
			lacks, err = repo.Missing(context.Background(), oids)
			for _, o := range lacks {
				missing[o] = true
			}
		}
		for id, r := range byID {
			switch {
			case err != nil:
				out = append(out, Problem{Kind: ProblemMissingGitObject, Object: id.String(), Detail: fmt.Sprintf("blob %s of %s: %v", r.Git, dir, err)})
			case missing[r.Git]:
				out = append(out, Problem{Kind: ProblemMissingGitObject, Object: id.String(), Detail: fmt.Sprintf("blob %s is missing from %s", r.Git, dir)})
			}
		}
	}
	return out, nil
}

// UnresolvedGitRefs returns those of ids that are git object references
// with no resolution yet (Resolve, ResolveMany), with their references,
// in one read transaction: what a background resolution still has to
// read from the repositories. Other IDs (stored blobs, in-place base
// references, resolved references) are left out.
func (s *Store) UnresolvedGitRefs(ids []ID) (map[ID]BaseRef, error) {
	out := map[ID]BaseRef{}
	if len(ids) == 0 {
		return out, nil
	}
	err := s.view(func(tx *stx) error {
		for _, id := range ids {
			if _, ok := out[id]; ok {
				continue
			}
			st, found, err := s.lookupRefTx(tx, id)
			if err != nil {
				return err
			}
			if found && !st.resolved && st.ref.Git != "" {
				out[id] = st.ref
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unresolved git refs: %w", err)
	}
	return out, nil
}
