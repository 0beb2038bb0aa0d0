package fusefs

import "github.com/hanwen/go-fuse/v2/fs"

// MemoryCounts are the sizes of what a mount keeps in memory, for the
// daemon's /debug/memory and the tests that check it stays bounded.
type MemoryCounts struct {
	// Inodes are the overlay's inodes reachable from the root (loaded
	// directories' entries, dirty or clean); LoadedDirs the directories
	// among them whose children are loaded.
	Inodes     int `json:"inodes"`
	LoadedDirs int `json:"loaded_dirs"`
	// Inos is the table of path-derived inode numbers handed out.
	Inos int `json:"inos"`
	// Nodes are go-fuse's nodes (inodes the kernel knows, plus their
	// ancestors).
	Nodes int `json:"nodes"`
	// FsmPaths are the paths the fsmonitor bookkeeping holds.
	FsmPaths int `json:"fsm_paths"`
	// Writers are attribution's per-inode and per-path records.
	Writers int `json:"writers"`
}

// MemoryCounts counts what the mount keeps in memory.
func (m *Mount) MemoryCounts() MemoryCounts {
	c := m.ov.memoryCounts()
	if m.rootNode != nil {
		c.Nodes = countNodes(m)
	}
	return c
}

func (o *overlay) memoryCounts() MemoryCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	var c MemoryCounts
	var walk func(in *inode)
	walk = func(in *inode) {
		c.Inodes++
		if in.children == nil {
			return
		}
		c.LoadedDirs++
		for _, ch := range in.children {
			if ch.isDir() {
				walk(ch)
			} else {
				c.Inodes++
			}
		}
	}
	walk(o.root)
	c.Inos = len(o.inos)
	c.FsmPaths = o.fsm.size()
	c.Writers = len(o.moreWriters) + len(o.removed) + len(o.taken) + len(o.takenRemoved)
	return c
}

// countNodes counts go-fuse's nodes reachable from the root (a hard-linked
// node once).
func countNodes(m *Mount) int {
	seen := map[*fs.Inode]bool{}
	var walk func(n *fs.Inode)
	walk = func(n *fs.Inode) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, ch := range n.Children() {
			walk(ch)
		}
	}
	walk(m.rootNode.EmbeddedInode())
	return len(seen)
}

// fsmBytes is the fsmonitor log's memory (fsmLogBytes bounds it).
func (o *overlay) fsmBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fsm.bytes
}
