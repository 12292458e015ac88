package mcpserver

import (
	"bytes"
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// sandbox_fork: the CLI's `sandbox fork` (Service.Fork).

type forkIn struct {
	Session     string `json:"session" jsonschema:"the sandbox to fork (sbx_…), from sandbox_create or sandbox_list"`
	Title       string `json:"title,omitempty" jsonschema:"what the fork is for, in a few words"`
	WithIgnored bool   `json:"with_ignored,omitempty" jsonschema:"take the files the repository ignores too (build output, installed dependencies); default: not"`
}

type forkOut struct {
	Session    sessionView `json:"session"`
	ForkedFrom string      `json:"forked_from" jsonschema:"the sandbox it was forked from"`
	// ForkedAtStep: the parent's last step when it was forked.
	ForkedAtStep int      `json:"forked_at_step" jsonschema:"the number of the parent's last step when it was forked (0: none)"`
	FollowAlong  []string `json:"follow_along" jsonschema:"commands for the user to watch and review your work in the fork: tell the user these"`
	Warnings     []string `json:"warnings" jsonschema:"what the user should know: tell the user these"`
}

func (s *Server) addSandboxFork() {
	add(s, &mcp.Tool{Name: "sandbox_fork", Title: "Fork a sandbox",
		Description: `Make a new sandbox that starts where another one is now, to try another approach without losing this one: its commits, its uncommitted changes and its untracked files (ignored ones too with with_ignored), and in a docker sandbox the files written outside the worktree. The two then go their own ways; each has its own steps and change request, against the same base commit. Returns the new sandbox (use its ID from then on) and follow_along for the user. Refused while a command runs in the sandbox in the foreground (wait for it, or step_kill it; background steps do not count and are not copied), and when the user has as many sandboxes as allowed.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}}, s.sandboxFork)
}

func (s *Server) sandboxFork(ctx context.Context, req *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, forkOut, error) {
	if err := checkTitle(in.Title); err != nil {
		return nil, forkOut{}, err
	}
	parent, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, forkOut{}, err
	}
	// A service of this call's own: what the fork left out comes back to
	// this caller only.
	svc := *s.o.Sandbox
	var notes bytes.Buffer
	svc.Notices, svc.Progress, svc.Verbose, svc.Log = &notes, nil, nil, nil
	sess, err := svc.Fork(ctx, parent, sandbox.ForkOptions{
		WithIgnored: in.WithIgnored, Title: in.Title,
		Origin: store.OriginMCP, OriginClient: clientOf(req.Session),
	})
	if err != nil {
		return nil, forkOut{}, err
	}
	out := forkOut{Session: viewSession(sess), ForkedFrom: sess.ForkedFrom, ForkedAtStep: sess.ForkedAtSeq,
		FollowAlong: s.followAlong(sess.ID), Warnings: noteLines(notes.String())}
	for _, gap := range svc.IsolationGaps(sess) {
		out.Warnings = append(out.Warnings, "this sandbox lacks "+gap)
	}
	s.logf("forked %s from %s for %s", sess.ID, parent.ID, sess.OriginClient)
	return nil, out, nil
}

// checkTitle refuses a title that is not one short line.
func checkTitle(title string) error {
	if len(title) > 200 || strings.ContainsAny(title, "\x00\n\r") {
		return fail.Usagef("title: one line of at most 200 bytes")
	}
	return nil
}

// noteLines are the lines a service wrote to its Notices, without their
// "xmode: " and "note: ", for a reply's warnings.
func noteLines(notes string) []string {
	out := []string{}
	for _, l := range strings.Split(strings.TrimSpace(notes), "\n") {
		if l = strings.TrimPrefix(strings.TrimPrefix(l, "xmode: "), "note: "); l != "" {
			out = append(out, l)
		}
	}
	return out
}
