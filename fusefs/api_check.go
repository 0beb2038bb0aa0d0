package fusefs

import "github.com/hanwen/go-fuse/v2/fs"

// Every go-fuse interface the node and file handle implement; a missing
// method is a compile error here rather than a silent ENOSYS.
var (
	_ fs.InodeEmbedder     = (*node)(nil)
	_ fs.NodeLookuper      = (*node)(nil)
	_ fs.NodeReaddirer     = (*node)(nil)
	_ fs.NodeMkdirer       = (*node)(nil)
	_ fs.NodeMknoder       = (*node)(nil)
	_ fs.NodeSymlinker     = (*node)(nil)
	_ fs.NodeCreater       = (*node)(nil)
	_ fs.NodeLinker        = (*node)(nil)
	_ fs.NodeUnlinker      = (*node)(nil)
	_ fs.NodeRmdirer       = (*node)(nil)
	_ fs.NodeRenamer       = (*node)(nil)
	_ fs.NodeGetattrer     = (*node)(nil)
	_ fs.NodeSetattrer     = (*node)(nil)
	_ fs.NodeReadlinker    = (*node)(nil)
	_ fs.NodeOpener        = (*node)(nil)
	_ fs.NodeFsyncer       = (*node)(nil)
	_ fs.NodeStatfser      = (*node)(nil)
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)

	_ fs.FileReader          = (*handle)(nil)
	_ fs.FileWriter          = (*handle)(nil)
	_ fs.FileFlusher         = (*handle)(nil)
	_ fs.FileFsyncer         = (*handle)(nil)
	_ fs.FileReleaser        = (*handle)(nil)
	_ fs.FileGetattrer       = (*handle)(nil)
	_ fs.FileLseeker         = (*handle)(nil)
	_ fs.FileAllocater       = (*handle)(nil)
	_ fs.FileGetlker         = (*handle)(nil)
	_ fs.FileSetlker         = (*handle)(nil)
	_ fs.FileSetlkwer        = (*handle)(nil)
	_ fs.FilePassthroughFder = (*ptHandle)(nil)

	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
	_ fs.FileReader       = (*ptHandle)(nil)
)
