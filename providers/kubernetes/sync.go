package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/providers/internal/archive"
)

// The worktree travels as in docker's sync mode (docs/kubernetes.md, "The
// worktree"): a tar of the host's worktree streamed into `tar -x` in the pod
// at Provision, a `tar -c` of the pod's copy streamed back by SyncBack and
// unpacked here as hostile input (archive.ReplaceWorktree). Both tars run
// as the sandbox user, inside the sandbox: the image needs a tar (busybox's
// will do). xmode.db and the evidence never leave this machine.

// errCopyEnded stops a tar writer once the other side stopped reading.
var errCopyEnded = errors.New("the copy ended")

// copyIn fills the pod's workspace with the worktree, as Workspace/worktree,
// before any step can run.
func (p *Provider) copyIn(ctx context.Context, pod, worktree string) error {
	uid, gid, err := sandboxUser(p.cfg)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := archive.WriteTree(pw, worktree, ".", int(uid), int(gid))
		pw.CloseWithError(err)
		read <- err
	}()
	code, out, err := p.runHelper(ctx, pod, []string{"/bin/sh", "-c", `cd "$1" && exec tar -x -f -`, "xmode-copy-in", Workspace}, pr, p.syncTimeout())
	pr.CloseWithError(errCopyEnded)
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errCopyEnded) {
		return fmt.Errorf("copy the worktree into the sandbox: %w", rerr)
	}
	if err != nil {
		return p.wrap(err, "copy the worktree into the sandbox")
	}
	return tarFailed(code, out, "copy the worktree into the sandbox")
}

// tarFailed is the error of a tar in the pod that exited code.
func tarFailed(code int, out, what string) error {
	switch code {
	case 0:
		return nil
	case 126, 127:
		return fail.Enginef("%s: the image has no tar (exit %d: %s): the kubernetes engine copies the worktree with tar — use an image with a tar (busybox's will do)", what, code, strings.TrimSpace(out))
	}
	return fail.Failedf("%s: tar exited %d: %s", what, code, strings.TrimSpace(out))
}

// SyncBack makes the host's worktree what the pod's copy is now
// (engine.WorktreeSyncer). The copy is hostile: it is unpacked into a fresh
// directory next to the worktree, within XMODE_SANDBOX_SYNC_MAX_BYTES, and
// swapped in only when all of it was accepted and the tar in the pod ended
// well (a tar cut short looks like a smaller worktree).
func (p *Provider) SyncBack(ctx context.Context, sb engine.Sandbox) error {
	if _, err := p.guard.CheckWorktree(sb.RunID, sb.Worktree); err != nil {
		return err
	}
	pod, err := p.runningPod(ctx, sb)
	if err != nil {
		return err
	}
	runDir, err := p.guard.RunDir(sb.RunID)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, p.syncTimeout())
	defer cancel()
	pr, pw := io.Pipe()
	errs := &headBuffer{limit: 4 << 10}
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		out := `cd "$1" && exec tar -c -f - worktree`
		if p.copyOutOverride != "" {
			out = p.copyOutOverride
		}
		err := p.stream(sctx, pod.Name, streamReq{cmd: []string{"/bin/sh", "-c", out, "xmode-copy-out", Workspace}, stdout: pw, stderr: errs})
		code, xerr := exitCode(err)
		pw.CloseWithError(io.EOF)
		res <- result{code, xerr}
	}()
	tarDone := func() error {
		// What follows the archive's end (tar pads it to a record) is
		// read and dropped, a bounded amount: the tar must be able to end.
		if n, _ := io.Copy(io.Discard, io.LimitReader(pr, 1<<20)); n == 1<<20 {
			cancel() // more than padding: the tar is not ending
		}
		pr.CloseWithError(errCopyEnded)
		r := <-res
		if r.err != nil {
			return p.wrap(r.err, "copy the worktree out of the sandbox")
		}
		return tarFailed(r.code, errs.String(), "copy the worktree out of the sandbox")
	}
	dropped, err := archive.ReplaceWorktree(runDir, pr, p.cfg.SyncMaxBytes, p.warnf, tarDone)
	pr.CloseWithError(errCopyEnded)
	cancel()
	if err != nil {
		return fmt.Errorf("sync back the worktree of session %s: %w", sb.SessionID, err)
	}
	if len(dropped) > 0 {
		p.warnf("sync back of session %s: left out %d entr%s the host must not have (%s)", sb.SessionID, len(dropped), map[bool]string{true: "y", false: "ies"}[len(dropped) == 1], strings.Join(archive.Head(dropped, 5), ", "))
	}
	return nil
}

// pushPath unpacks a tar of one path of the host's worktree over the pod's
// copy, after checking that each directory on the way ($@) is a directory
// there and not a link a step planted (the tar runs as the sandbox user,
// who could write where such a link leads anyway; the check keeps the
// copy where the host put it).
const pushPath = `cd "$0" || exit 4
for d in "$@"; do
	if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then echo "$d"; exit 3; fi
done
exec tar -x -f -`

// PushPath brings rel of the host's worktree into the pod's copy
// (engine.WorktreePusher), for `sandbox cp` into a session and file steps;
// a path the host no longer has is removed from the copy.
func (p *Provider) PushPath(ctx context.Context, sb engine.Sandbox, rel string) error {
	if _, err := p.guard.CheckWorktree(sb.RunID, sb.Worktree); err != nil {
		return err
	}
	rel = path.Clean(rel)
	if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return fail.Usagef("%q is not a path inside the worktree", rel)
	}
	pod, err := p.runningPod(ctx, sb)
	if err != nil {
		return err
	}
	if gone, err := archive.MissingOnHost(sb.Worktree, rel); err != nil {
		return err
	} else if gone {
		code, out, err := p.runHelper(ctx, pod.Name, []string{"/bin/sh", "-c", `exec rm -rf -- "$1"`, "xmode-rm", podPath(rel)}, nil, p.syncTimeout())
		if err != nil {
			return p.wrap(err, "remove "+rel+" from the sandbox")
		}
		if code != 0 {
			return fail.Failedf("remove %s from the sandbox: rm exited %d: %s", rel, code, strings.TrimSpace(out))
		}
		return nil
	}
	uid, gid, err := sandboxUser(p.cfg)
	if err != nil {
		return err
	}
	cmd := []string{"/bin/sh", "-c", pushPath, Workspace}
	var dirs []string
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		dirs = append([]string{path.Join("worktree", d)}, dirs...)
	}
	cmd = append(cmd, dirs...)
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		err := archive.WriteTree(pw, sb.Worktree, rel, int(uid), int(gid))
		pw.CloseWithError(err)
		read <- err
	}()
	code, out, err := p.runHelper(ctx, pod.Name, cmd, pr, p.syncTimeout())
	pr.CloseWithError(errCopyEnded)
	if rerr := <-read; rerr != nil && !errors.Is(rerr, errCopyEnded) {
		return fmt.Errorf("copy %s into the sandbox: %w", rel, rerr)
	}
	if err != nil {
		return p.wrap(err, "copy "+rel+" into the sandbox")
	}
	if code == 3 {
		return fail.Refusedf("%s is not a directory in the sandbox's worktree (a symlink?): refusing to copy through it", strings.TrimPrefix(strings.TrimSpace(out), "worktree/"))
	}
	return tarFailed(code, out, "copy "+rel+" into the sandbox")
}

// PathPresent reports whether path (absolute, as the pod sees it) exists in
// the session's pod: its image, or what is mounted there.
func (p *Provider) PathPresent(ctx context.Context, sb engine.Sandbox, name string) (bool, error) {
	if !path.IsAbs(name) {
		return false, fail.Usagef("%q is not an absolute path", name)
	}
	pod, err := p.runningPod(ctx, sb)
	if err != nil {
		return false, err
	}
	code, out, err := p.runHelper(ctx, pod.Name, []string{"/bin/sh", "-c", `[ -e "$1" ] || [ -L "$1" ]`, "xmode-stat", path.Clean(name)}, nil, p.callTimeout())
	if err != nil {
		return false, p.wrap(err, "look up "+name+" in the sandbox")
	}
	switch code {
	case 0:
		return true, nil
	case 1:
		return false, nil
	}
	return false, fmt.Errorf("look up %s in the sandbox: exit %d: %s", name, code, strings.TrimSpace(out))
}
