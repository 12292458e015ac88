package fsguard

import (
	"fmt"
	"io/fs"
	"os"
)

// ChownTree gives dir and everything in it to uid:gid, through an os.Root
// on dir: it follows no symlink (a link is given, not its target) and
// reaches nothing outside dir. For what xmode itself just checked out, before
// any step ran: the sandbox user must own its worktree to write it.
func ChownTree(dir string, uid, gid int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(name string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return root.Lchown(name, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("give %s to %d:%d: %w", dir, uid, gid, err)
	}
	return nil
}
