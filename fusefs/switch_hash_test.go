package fusefs

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
	"github.com/acyclicfs/acyclicfs/store"
)

// blockedWait bounds how long a test waits for a request that must not be
// blocked; reaching it is the failure, never the synchronisation.
const blockedWait = 30 * time.Second

// racyCaptured writes name through the mount, captures, and marks the
// file's capture memo racy (as a write within racyWindow of the capture
// leaves it; forced here so the test does not depend on the host's speed).
func racyCaptured(t *testing.T, m *Mount, mnt, name, content string) (store.ID, *inode) {
	t.Helper()
	mustWrite(t, filepath.Join(mnt, name), content)
	waitReleased(m)
	id, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	m.ov.mu.Lock()
	defer m.ov.mu.Unlock()
	in := m.ov.root.children[name]
	if in == nil || !in.upper || in.capID.IsZero() {
		t.Fatalf("%s: no captured upper file", name)
	}
	in.capRacy = true
	m.ov.markRacy(in)
	return id, in
}

// holdRacyHash arms the hash of racily clean files in a view switch to
// stop until release is called; hashing is closed when one has started.
func holdRacyHash(t *testing.T) (hashing <-chan struct{}, release func()) {
	started, gate := make(chan struct{}), make(chan struct{})
	var once, relOnce sync.Once
	disarm := failpoint.ArmForTest(func(string) {
		once.Do(func() { close(started) })
		<-gate
	}, "switch.hash-racy")
	release = func() { relOnce.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); disarm() })
	return started, release
}

// TestSwitchHashesRacyFileOutsideLock: a view switch that must hash a
// racily clean upper file (its stat cannot tell a same-tick write) does so
// without holding the overlay lock: while the hash is stopped, a create, a
// lookup and a read of other files of the mount complete. The file is
// still found clean afterwards.
func TestSwitchHashesRacyFileOutsideLock(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{"other": "o"})
	m, mnt := mountT(t, objs, root, nil)
	id, in := racyCaptured(t, m, mnt, "big", strings.Repeat("x", 4<<20))

	hashing, release := holdRacyHash(t)
	switched := make(chan error, 1)
	go func() { switched <- m.SwitchView(id) }()
	<-hashing

	done := make(chan error, 1)
	go func() {
		err := os.WriteFile(filepath.Join(mnt, "new"), []byte("n"), 0o644)
		if err == nil {
			_, err = os.Lstat(filepath.Join(mnt, "absent"))
			if os.IsNotExist(err) {
				err = nil
			}
		}
		if err == nil {
			var b []byte
			if b, err = os.ReadFile(filepath.Join(mnt, "other")); err == nil && string(b) != "o" {
				t.Errorf("other reads %q", b)
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(blockedWait):
		release()
		t.Fatal("requests on other files blocked while the view switch hashed a file")
	}
	release()
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	m.ov.mu.Lock()
	seq := in.seq
	m.ov.mu.Unlock()
	if seq != 0 {
		t.Fatalf("unchanged racy file stayed dirty after the switch (seq %d)", seq)
	}
	if got := mustRead(t, filepath.Join(mnt, "big")); len(got) != 4<<20 {
		t.Fatalf("big has %d bytes", len(got))
	}
}

// TestSwitchRacyWriteDuringHash: a racily clean file written while the
// view switch hashes it (without the lock) stays dirty — the switch never
// takes it for clean — and the next capture stores the new content.
func TestSwitchRacyWriteDuringHash(t *testing.T) {
	objs := newFakeObjects(t)
	root := objs.build(t, spec{})
	m, mnt := mountT(t, objs, root, nil)
	old := strings.Repeat("a", 1<<20)
	id, in := racyCaptured(t, m, mnt, "f", old)

	hashing, release := holdRacyHash(t)
	switched := make(chan error, 1)
	go func() { switched <- m.SwitchView(id) }()
	<-hashing
	// The same size, written in place: only the content differs.
	neu := strings.Repeat("b", 1<<20)
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(neu), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitReleased(m)
	release()
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	m.ov.mu.Lock()
	upper := in.upper
	m.ov.mu.Unlock()
	if !upper {
		t.Fatal("the switch dropped a file written during its hash")
	}
	if got := mustRead(t, filepath.Join(mnt, "f")); got != neu {
		t.Fatalf("f reads %.8q…, want the write made during the switch", got)
	}
	id2, changed, err := m.Capture()
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if got := objs.flatten(t, id2)["f"]; got != "file:"+neu {
		t.Fatalf("captured %.12q…", got)
	}
}
