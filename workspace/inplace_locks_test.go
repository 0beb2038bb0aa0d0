package workspace

import (
	"context"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/acyclicfs/acyclicfs/internal/failpoint"
)

// TestInPlaceSyncsOfTwoDirectoriesRunAtOnce: while the materialization of
// one in-place workspace is held mid-way (after its first edit), a landing
// into another in-place workspace, which materializes into its own
// directory, completes; the held workspace's lock is still taken (its
// directory keeps one writer), and once released it completes too.
func TestInPlaceSyncsOfTwoDirectoriesRunAtOnce(t *testing.T) {
	ctx := context.Background()
	m := openTest(t)
	dirs := map[string]string{}
	for _, ws := range []string{"a", "b"} {
		dir := filepath.Join(t.TempDir(), ws)
		write(t, dir, map[string]string{"f": "before " + ws})
		if _, err := m.CreateInPlace(ws, dir); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Fork(ws, ws+"-agent", ""); err != nil {
			t.Fatal(err)
		}
		edit := filepath.Join(t.TempDir(), "edit-"+ws)
		write(t, edit, map[string]string{"f": "after " + ws, "g/h": "new " + ws})
		if _, _, err := m.Commit(ctx, ws+"-agent", edit); err != nil {
			t.Fatal(err)
		}
		dirs[ws] = dir
	}

	// The first materialization to pass its first edit (a's) waits there.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	disarm := failpoint.ArmForTest(func(string) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}, "materialize.after-first")
	defer disarm()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	aDone := make(chan error, 1)
	go func() {
		_, err := m.Land(ctx, "a-agent", RebaseOptions{})
		aDone <- err
	}()
	<-entered
	if !m.ip.locks.held("a") {
		t.Fatal("a's materialization is under way without its directory's lock")
	}

	bDone := make(chan error, 1)
	go func() {
		_, err := m.Land(ctx, "b-agent", RebaseOptions{})
		bDone <- err
	}()
	select {
	case err := <-bDone:
		if err != nil {
			t.Fatalf("land b: %v", err)
		}
	case <-time.After(30 * time.Second): // a failure bound, not a synchronization
		t.Fatal("landing into b waited for a's materialization: one lock for every directory")
	}
	if got, want := snapshot(t, dirs["b"]), map[string]string{"f": "after b", "g/": "", "g/h": "new b"}; !maps.Equal(got, want) {
		t.Fatalf("b's directory while a's sync is held:\n got %v\nwant %v", got, want)
	}
	if m.ip.locks.held("b") {
		t.Fatal("b's lock outlived its sync")
	}
	select {
	case err := <-aDone:
		t.Fatalf("a's landing finished while its materialization was held: %v", err)
	default:
	}
	if !m.ip.locks.held("a") {
		t.Fatal("a's lock was released while its materialization is held")
	}

	close(release)
	released = true
	if err := <-aDone; err != nil {
		t.Fatalf("land a: %v", err)
	}
	if got, want := snapshot(t, dirs["a"]), map[string]string{"f": "after a", "g/": "", "g/h": "new a"}; !maps.Equal(got, want) {
		t.Fatalf("a's directory:\n got %v\nwant %v", got, want)
	}
}

// TestDirLocksSerializeOneKey: a second lock of the same key waits for the
// first's unlock; a lock of another key does not; an entry is dropped once
// nobody holds or waits for it.
func TestDirLocksSerializeOneKey(t *testing.T) {
	var l dirLocks
	unlockA := l.lock("a")
	got := make(chan string, 2)
	for _, k := range []string{"a", "b"} {
		go func() {
			l.lock(k)()
			got <- k
		}()
	}
	if first := <-got; first != "b" {
		t.Fatalf("a second lock of %s was taken while the first was held", first)
	}
	if l.held("b") {
		t.Fatal("b's entry outlived its unlock")
	}
	unlockA()
	if second := <-got; second != "a" {
		t.Fatalf("got %s, want a's second lock", second)
	}
	if l.held("a") {
		t.Fatal("a's entry outlived its unlocks")
	}
}
