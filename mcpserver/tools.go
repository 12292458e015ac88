package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/changes"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/evidence"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// The tools: each a JSON schema (from its input type), a description
// written for a model, and annotations; each handler resolves the session
// in the server's scope and calls the service the CLI calls. Never a
// review tool: an agent does not approve its own change request.
//
// A background sandbox_exec is the CLI's `sandbox exec --detach`
// (Service.ExecDetached); step_status and step_logs read any step, running
// or not, and step_kill is `sandbox kill` (Service.KillStep).

// Caps on what a reply carries; the evidence keeps everything.
const (
	// OutputCap is the most of each stream sandbox_exec returns: its first
	// outputHead bytes and its last OutputCap-outputHead.
	OutputCap  = 64 << 10
	outputHead = 16 << 10
	// LogsCap is the most step_logs returns at once.
	LogsCap = 1 << 20
	// PatchCap is the most of a patch sandbox_diff and cr_show return.
	PatchCap = 256 << 10
	// DefaultTimeout bounds a step that names no timeout_seconds.
	DefaultTimeout = 10 * time.Minute
)

func ptr[T any](v T) *T { return &v }

// add registers a tool whose handler returns its output or an error that
// toolError turns into the model's message, and logs the call.
func add[In, Out any](s *Server, t *mcp.Tool, h func(context.Context, *mcp.CallToolRequest, In) (*mcp.CallToolResult, Out, error)) {
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		start := time.Now()
		res, out, err := h(ctx, req, in)
		if err != nil {
			s.logf("%s: %v (%s)", t.Name, err, time.Since(start).Round(time.Millisecond))
			var zero Out
			return nil, zero, toolError(err)
		}
		s.logf("%s: ok (%s)", t.Name, time.Since(start).Round(time.Millisecond))
		return res, out, nil
	})
}

// addRaw registers a tool as add does, but decodes its arguments and
// encodes its output itself, for the tools that carry a file's content:
// the SDK's own pass over them (the whole input and output decoded into
// maps, validated against the schema and encoded again) is several more
// passes over every byte of it. The schemas the client sees are the same,
// inferred from In and Out; the input is checked by decoding it into In
// strictly (an object, every required field, no unknown one, each of its
// type); the output is xmode's own types, encoded as they are, once.
func addRaw[In, Out any](s *Server, t *mcp.Tool, h func(context.Context, *mcp.CallToolRequest, In) (*mcp.CallToolResult, Out, error)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, err))
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", t.Name, err))
	}
	t.InputSchema, t.OutputSchema = in, out
	fields := fieldsOf[In]()
	s.mcp.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		start := time.Now()
		failed := func(err error) (*mcp.CallToolResult, error) {
			s.logf("%s: %v (%s)", t.Name, err, time.Since(start).Round(time.Millisecond))
			var res mcp.CallToolResult
			res.SetError(toolError(err))
			return &res, nil
		}
		v, err := decodeArgs[In](req.Params.Arguments, fields, in.Required)
		if err != nil {
			return failed(err)
		}
		res, o, err := h(ctx, req, v)
		if err != nil {
			return failed(err)
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		// The output as it is, for the SDK to encode with the rest of the
		// result: encoded here first, a read's content would be escaped
		// once more and then scanned again to be compacted.
		res.StructuredContent = o
		if res.Content == nil {
			b, err := json.Marshal(o)
			if err != nil {
				return failed(fmt.Errorf("encode the reply: %w", err))
			}
			res.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
		}
		s.logf("%s: ok (%s)", t.Name, time.Since(start).Round(time.Millisecond))
		return res, nil
	})
}

// argFields maps the JSON names of a tool's input type to its fields.
type argFields map[string]int

// fieldsOf is the argFields of In, a struct of plain fields each named
// by a json tag, as the tools' inputs are.
func fieldsOf[In any]() argFields {
	t := reflect.TypeFor[In]()
	f := argFields{}
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if sf.Anonymous || !sf.IsExported() || name == "" || name == "-" {
			panic(fmt.Sprintf("%s.%s: a tool's input field needs a json name of its own", t, sf.Name))
		}
		f[name] = i
	}
	return f
}

// decodeArgs decodes a tool's arguments into In as its schema has them:
// an object with every field of required and no other. One pass: each
// member is decoded straight into its field (as encoding/json matches
// names: exactly, else regardless of case) and noted as given, so a
// file's content is scanned twice (read, decoded) rather than four times
// by a decode into In and another into a map for the required check.
func decodeArgs[In any](args json.RawMessage, fields argFields, required []string) (In, error) {
	var v In
	if t := bytes.TrimSpace(args); len(t) == 0 || string(t) == "null" {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	if t, err := dec.Token(); err != nil {
		return v, fail.Usagef("the arguments: %v", err)
	} else if t != json.Delim('{') {
		return v, fail.Usagef("the arguments: %s is not a JSON object", bytes.TrimSpace(args)[:1])
	}
	rv := reflect.ValueOf(&v).Elem()
	given := make(map[string]bool, len(fields))
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return v, fail.Usagef("the arguments: %v", err)
		}
		key, _ := t.(string)
		i, ok := fields[key]
		if !ok {
			for name, j := range fields {
				if strings.EqualFold(name, key) {
					i, ok = j, true
					break
				}
			}
		}
		if !ok {
			return v, fail.Usagef("the arguments: json: unknown field %q", key)
		}
		if err := dec.Decode(rv.Field(i).Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				te.Struct, te.Field = rv.Type().Name(), key
			}
			return v, fail.Usagef("the arguments: %v", err)
		}
		given[key] = true
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return v, fail.Usagef("the arguments: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, fail.Usagef("the arguments: more than one JSON value")
	}
	for _, name := range required {
		if !given[name] {
			return v, fail.Usagef("%q is required", name)
		}
	}
	return v, nil
}

// Annotations of each kind of tool.
var (
	readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
	// additive: makes something new, removes nothing.
	additive = &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}
)

func (s *Server) addTools() {
	add(s, &mcp.Tool{Name: "sandbox_create", Title: "Create a sandbox",
		Description: `Create a sandbox for a repository: a fresh checkout of its committed state (a branch, tag or commit) in which sandbox_exec and the file tools work, each call recorded as evidence. Returns the session ID every other tool takes, the base commit, and follow_along: the commands the user runs to watch and review your work — tell the user those. Uncommitted changes in the repository are not in the sandbox (a warning says so). Commands run where the user configured xmode's engine: a hardened docker container, or, with the host engine, on the user's machine as the user (a warning says so).`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)}}, s.sandboxCreate)
	add(s, &mcp.Tool{Name: "sandbox_list", Title: "List sandboxes",
		Description: `List your sandboxes (the ones MCP clients made for this user): ID, status, repository, ref, title, when it expires. Open ones only, unless all is set.`,
		Annotations: readOnly}, s.sandboxList)
	add(s, &mcp.Tool{Name: "sandbox_show", Title: "Show a sandbox",
		Description: `Show one sandbox and the steps recorded in it so far (commands and file operations: number, name, state, exit code, duration).`,
		Annotations: readOnly}, s.sandboxShow)
	add(s, &mcp.Tool{Name: "sandbox_stop", Title: "Stop a sandbox",
		Description: `Stop a sandbox: its container and worktree go, its evidence and change requests stay. Only when the user no longer needs it. A step still running (another call's) makes it refuse unless force is set, which ends that step.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.sandboxStop)
	add(s, &mcp.Tool{Name: "sandbox_exec", Title: "Run a command in a sandbox",
		Description: `Run one command in the sandbox's worktree and wait for it: give command (a shell string, run by /bin/sh -c in the sandbox: pipes, &&, globs work) or argv (no shell). Returns the exit code, the step number and stdout and stderr — each cut to its first 16 KiB and last 48 KiB when longer (the whole output is in the step's evidence: step_logs). A non-zero exit is a result, not an error. The command runs in the sandbox's engine only: in a docker sandbox, a hardened container; with the host engine, on the user's machine as the user. timeout_seconds bounds it (default 600); a cancelled call ends the step's processes as Ctrl-C would. With background set, the call returns the step number at once while the command goes on (a server, a watcher, a long build): read it with step_status and step_logs, end it with step_kill; it has no timeout unless you give one and ends at the latest with the sandbox; later steps reach a server it starts on localhost. env names variables of the server's environment to pass in (their values are masked in what is recorded and returned).`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}}, s.sandboxExec)
	add(s, &mcp.Tool{Name: "step_status", Title: "A step's status",
		Description: `The status of one step of a sandbox (a command or a file operation, by its number): running or finished, exit code, duration, how many bytes of output each stream has, and where its evidence is.`,
		Annotations: readOnly}, s.stepStatus)
	add(s, &mcp.Tool{Name: "step_logs", Title: "A step's output",
		Description: `Read a step's recorded output (stdout or stderr), also while it runs: its last tail bytes (default 16 KiB), or from a byte offset (to read on where an earlier call stopped: next_offset). At most 1 MiB per call.`,
		Annotations: readOnly}, s.stepLogs)
	add(s, &mcp.Tool{Name: "step_kill", Title: "End a running step",
		Description: `End a running step of a sandbox — a background step (sandbox_exec with background) or a long one another call is waiting for — as Ctrl-C or a timeout end one: signal (TERM by default; INT, HUP, QUIT, KILL) to its processes, KILL to what is left after a grace period. Returns once its end is recorded, with its status (143 for TERM, 137 when KILL was needed). A step that is not running is refused.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}}, s.stepKill)
	addRaw(s, &mcp.Tool{Name: "file_read", Title: "Read a file",
		Description: `Read a text file of the sandbox's worktree: all of it, or lines start_line to end_line (1-based). At most 1 MiB per call: a longer read stops at a line and next_line says where to go on. Paths are relative to the worktree; links are not followed and .git is not readable (use git through sandbox_exec).`,
		Annotations: readOnly}, s.fileRead)
	add(s, &mcp.Tool{Name: "file_list", Title: "List files",
		Description: `List a directory of the sandbox's worktree (path, default its top), or, with pattern, every path under it that matches a glob: * and ? within a name, ** across directories (**/*.go: every Go file). .git is never listed and links are not followed. At most 2000 entries.`,
		Annotations: readOnly}, s.fileList)
	addRaw(s, &mcp.Tool{Name: "file_write", Title: "Write a file",
		Description: `Write a whole file of the sandbox's worktree: create it (and its directories) or replace it. content is at most 8 MiB. Replaces only a regular file: a link or a directory at path is refused. To change part of a file, use file_edit.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.fileWrite)
	addRaw(s, &mcp.Tool{Name: "file_edit", Title: "Edit a file",
		Description: `Replace exact text in a file of the sandbox's worktree: old_string must occur exactly once (copy it from file_read, whitespace included, with enough lines around it to be unique), or set replace_all to change every occurrence. A missing or ambiguous old_string changes nothing and says where it occurs.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}}, s.fileEdit)
	add(s, &mcp.Tool{Name: "file_delete", Title: "Delete a file",
		Description: `Delete a file or a link (never what it points to) of the sandbox's worktree; a directory only with recursive.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.fileDelete)
	add(s, &mcp.Tool{Name: "sandbox_diff", Title: "Diff a sandbox",
		Description: `What the sandbox changed against its base commit — your commits, uncommitted and new files, with the repository's ignore rules — as a patch (cut at 256 KiB) with its stat, or the stat alone. What cr_create would package.`,
		Annotations: readOnly}, s.sandboxDiff)
	add(s, &mcp.Tool{Name: "cr_create", Title: "Create a change request",
		Description: `Freeze what the sandbox changed into a change request for the user to review: the patch, the stat, and the evidence of every step. title says what it does (default: the sandbox's title, else your last commit's subject); message says what you changed and why. Returns its ID and the commands the user reviews it with — give them to the user. You cannot approve it yourself.`,
		Annotations: additive}, s.crCreate)
	add(s, &mcp.Tool{Name: "cr_show", Title: "Show a change request",
		Description: `Show a change request of one of your sandboxes: title, status, reviews, stat, the steps of its evidence, and with patch the patch (cut at 256 KiB).`,
		Annotations: readOnly}, s.crShow)
}

// --- the sandbox

// sessionView is a sandbox as the tools show it.
type sessionView struct {
	ID         string `json:"id"`
	Status     string `json:"status" jsonschema:"open, provisioning, destroyed or failed"`
	EndReason  string `json:"end_reason,omitempty"`
	Error      string `json:"error,omitempty"`
	Title      string `json:"title,omitempty"`
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	BaseCommit string `json:"base_commit"`
	Engine     string `json:"engine" jsonschema:"where its commands run: docker (a container) or host (the user's machine)"`
	Worktree   string `json:"worktree" jsonschema:"the worktree's path on the server's machine (not for your own tools: use the file tools)"`
	Evidence   string `json:"evidence" jsonschema:"the directory of its evidence"`
	CreatedAt  string `json:"created_at"`
	ExpiresAt  string `json:"expires_at"`
	Client     string `json:"client,omitempty" jsonschema:"the MCP client that made it"`
}

func viewSession(sess *store.Session) sessionView {
	return sessionView{
		ID: sess.ID, Status: sess.Status, EndReason: sess.EndReason, Error: sess.Error, Title: sess.Title,
		Repository: sess.Repo, Ref: sess.Ref, BaseCommit: sess.BaseCommit, Engine: sess.Engine,
		Worktree: sess.WorktreePath, Evidence: sess.RunDir, CreatedAt: stamp(sess.CreatedAt), ExpiresAt: stamp(sess.ExpiresAt),
		Client: sess.OriginClient,
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

type createIn struct {
	Repository string `json:"repository,omitempty" jsonschema:"the repository to check out: a local path or a git URL; default: the client's root (the project you were opened in), else the server's working directory"`
	Ref        string `json:"ref,omitempty" jsonschema:"branch, tag or commit; default: the repository's HEAD branch"`
	Project    string `json:"project,omitempty" jsonschema:"a project ID (with project machines: a warm checkout of that project)"`
	Title      string `json:"title,omitempty" jsonschema:"what the sandbox is for, in a few words (the change request's default title)"`
}

type createOut struct {
	Session sessionView `json:"session"`
	// FollowAlong: what the user runs to watch and review.
	FollowAlong []string `json:"follow_along" jsonschema:"commands for the user to watch and review your work: tell the user these"`
	Warnings    []string `json:"warnings" jsonschema:"what the user should know: tell the user these"`
}

func (s *Server) sandboxCreate(ctx context.Context, req *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, createOut, error) {
	if len(in.Title) > 200 || strings.ContainsAny(in.Title, "\x00\n\r") {
		return nil, createOut{}, fail.Usagef("title: one line of at most 200 bytes")
	}
	root := ""
	if req.Session != nil && wantsRoots(req, in.Repository) {
		if multiRoundTrip(req.Session) {
			// Ask for the client's roots first; the call comes again with
			// them (a server may not send a request while serving one).
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{rootsRequest: &mcp.ListRootsParams{}}}, createOut{}, nil
		}
		// An older protocol: ask directly, and do without the roots of a
		// client that does not answer.
		root = askRoots(ctx, req.Session)
	}
	repo, err := s.repository(req, root, in.Repository)
	if err != nil {
		return nil, createOut{}, err
	}
	// A service of this call's own, so the notes a create makes (uncommitted
	// changes left out) come back to this caller only.
	svc := *s.o.Sandbox
	var notes bytes.Buffer
	svc.Notices, svc.Progress, svc.Verbose, svc.Log = &notes, nil, nil, nil
	sess, err := svc.Create(ctx, sandbox.CreateOptions{
		Repo: repo, Ref: in.Ref, Project: in.Project, Title: in.Title,
		Origin: store.OriginMCP, OriginClient: clientOf(req.Session),
	})
	if err != nil {
		return nil, createOut{}, err
	}
	out := createOut{Session: viewSession(sess), FollowAlong: s.followAlong(sess.ID), Warnings: []string{}}
	for _, l := range strings.Split(strings.TrimSpace(notes.String()), "\n") {
		if l = strings.TrimPrefix(strings.TrimPrefix(l, "xmode: "), "note: "); l != "" {
			out.Warnings = append(out.Warnings, l)
		}
	}
	if s.o.Sandbox.OnHost(sess) {
		out.Warnings = append(out.Warnings, "this sandbox's commands run on this machine as the user (the host engine): its worktree is separate, the machine is not; for isolation the user sets XMODE_SANDBOX_ENGINE=docker and XMODE_RUNNER_MODE=cloud_worker for the server")
	}
	s.logf("created %s (%s at %s) for %s", sess.ID, sess.Repo, sess.Ref, sess.OriginClient)
	return nil, out, nil
}

// repository is the repository a create checks out: as given (a relative
// path is taken from the client's root, else the server's directory), else
// the client's first file:// root, else the server's working directory.
func (s *Server) repository(req *mcp.CallToolRequest, root, given string) (string, error) {
	if strings.ContainsRune(given, 0) {
		return "", fail.Usagef("repository: holds a NUL byte")
	}
	base := s.o.WorkDir
	if root == "" {
		root = clientRoot(req)
	}
	if root != "" {
		base = root
	}
	if err := checkTransport(given); err != nil {
		return "", err
	}
	switch {
	case given == "":
		return base, nil
	case strings.Contains(given, "://") || filepath.IsAbs(given):
		return given, nil
	case strings.Contains(given, ":") && !strings.Contains(strings.SplitN(given, ":", 2)[0], "/"):
		return given, nil // host:path, as git reads it
	}
	return filepath.Join(base, given), nil
}

// checkTransport refuses a repository git would reach through a program
// on this machine: a remote helper (TRANSPORT::ADDRESS runs
// git-remote-TRANSPORT) or a URL scheme other than git's own transports,
// which runs git-remote-SCHEME the same way. A client's word must not pick
// a program to run on the host; the user's CLI may.
func checkTransport(repo string) error {
	if strings.Contains(repo, "::") {
		return fail.Usagef("repository %q names a git remote helper (TRANSPORT::), which would run a program on the user's machine: give a path or an https://, ssh:// or git:// URL", repo)
	}
	if scheme, _, ok := strings.Cut(repo, "://"); ok {
		switch strings.ToLower(scheme) {
		case "https", "http", "ssh", "git", "file", "git+ssh", "ssh+git":
		default:
			return fail.Usagef("repository %q: %s:// is not a transport of git's own (it would run git-remote-%s on the user's machine): give a path or an https://, ssh:// or git:// URL", repo, scheme, scheme)
		}
	}
	return nil
}

// rootsRequest is the id of sandbox_create's request for the client's
// roots (multi round-trip: the SDK asks a client of an older protocol
// directly and calls the tool again with the answer).
const rootsRequest = "roots"

// wantsRoots: sandbox_create needs the client's roots to find the
// repository (none or a relative one given), the client has roots, and has
// not yet said what they are.
func wantsRoots(req *mcp.CallToolRequest, given string) bool {
	if given != "" && (filepath.IsAbs(given) || strings.Contains(given, ":")) {
		return false
	}
	if p := req.Session.InitializeParams(); p == nil || p.Capabilities == nil || p.Capabilities.RootsV2 == nil {
		return false
	}
	_, answered := req.Params.InputResponses[rootsRequest]
	return !answered
}

// multiRoundTrip: the client's protocol has a server ask for input in a
// call's result (2026-07-28 on); before it, a server sends its request.
func multiRoundTrip(ss *mcp.ServerSession) bool {
	p := ss.InitializeParams()
	return p != nil && p.ProtocolVersion >= "2026-07-28" // versions are dates: they sort as strings
}

// askRoots asks a client of an older protocol for its roots: the first
// file:// one, "" when it has none or does not answer within a few seconds.
func askRoots(ctx context.Context, ss *mcp.ServerSession) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := ss.ListRoots(ctx, nil)
	if err != nil {
		return ""
	}
	return firstFileRoot(res)
}

// clientRoot is the first file:// root the client gave in answer to
// rootsRequest, "" when none.
func clientRoot(req *mcp.CallToolRequest) string {
	if req == nil || req.Params == nil {
		return ""
	}
	res, ok := req.Params.InputResponses[rootsRequest].(*mcp.ListRootsResult)
	if !ok || res == nil {
		return ""
	}
	return firstFileRoot(res)
}

// firstFileRoot is the path of the first file:// root, "" when none.
func firstFileRoot(res *mcp.ListRootsResult) string {
	if res == nil {
		return ""
	}
	for _, r := range res.Roots {
		u, err := url.Parse(r.URI)
		if err == nil && u.Scheme == "file" && u.Path != "" {
			return u.Path
		}
	}
	return ""
}

func (s *Server) followAlong(id string) []string {
	x := s.xmodeCommand()
	return []string{
		x + " sandbox logs " + id + " --follow   # each step as it runs",
		x + " sandbox diff " + id + "            # what changed so far",
		x + " sandbox shell " + id + "           # a shell in the sandbox",
	}
}

// xmodeCommand is an xmode command line for the user, with the server's
// --storage-root when it is not the default.
func (s *Server) xmodeCommand(args ...string) string {
	x := "xmode"
	if s.o.StorageRootArg != "" {
		x += " --storage-root " + shellQuote(s.o.StorageRootArg)
	}
	for _, a := range args {
		x += " " + shellQuote(a)
	}
	return x
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type listIn struct {
	All bool `json:"all,omitempty" jsonschema:"also the sandboxes that have ended"`
}

type listOut struct {
	Sandboxes []sessionView `json:"sandboxes"`
}

func (s *Server) sandboxList(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	f := store.Filter{All: in.All, User: s.o.Sandbox.Cfg.User}
	if !s.o.AllSessions {
		f.Origin = store.OriginMCP
	}
	sessions, err := s.o.Sandbox.Store.List(ctx, f)
	if err != nil {
		return nil, listOut{}, err
	}
	out := listOut{Sandboxes: []sessionView{}}
	for _, sess := range sessions {
		out.Sandboxes = append(out.Sandboxes, viewSession(sess))
	}
	return nil, out, nil
}

type sessionIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID (sbx_…), from sandbox_create or sandbox_list"`
}

// stepView is a step as the tools show it.
type stepView struct {
	Step       int      `json:"step"`
	Name       string   `json:"name"`
	Argv       []string `json:"argv"`
	State      string   `json:"state" jsonschema:"running, finished or lost"`
	ExitCode   *int     `json:"exit_code"`
	Signal     string   `json:"signal,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	StartedAt  string   `json:"started_at"`
	DurationMS *int64   `json:"duration_ms"`
	Background bool     `json:"background,omitempty" jsonschema:"started with sandbox_exec's background"`
	StoppedBy  string   `json:"stopped_by,omitempty" jsonschema:"what ended it early: sandbox kill (step_kill) or sandbox stop"`
	LostReason string   `json:"lost_reason,omitempty" jsonschema:"why a lost step's end is unknown"`
}

func viewStep(r store.StepRow) stepView {
	v := stepView{Step: r.Seq, Name: r.Name, Argv: r.Argv, State: r.State, ExitCode: r.ExitCode, Signal: r.Signal,
		TimedOut: r.TimedOut, StartedAt: stamp(r.StartedAt), Background: r.Detached, StoppedBy: r.StoppedBy, LostReason: r.LostReason}
	if v.Argv == nil {
		v.Argv = []string{}
	}
	if r.FinishedAt != nil {
		v.DurationMS = ptr(r.FinishedAt.Sub(r.StartedAt).Milliseconds())
	}
	return v
}

type showOut struct {
	Session sessionView `json:"session"`
	Steps   []stepView  `json:"steps"`
}

func (s *Server) sandboxShow(ctx context.Context, _ *mcp.CallToolRequest, in sessionIn) (*mcp.CallToolResult, showOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, showOut{}, err
	}
	rows, err := s.o.Sandbox.Store.Steps(ctx, sess.RunID)
	if err != nil {
		return nil, showOut{}, err
	}
	out := showOut{Session: viewSession(sess), Steps: []stepView{}}
	for _, r := range rows {
		if r.SessionID == sess.ID {
			out.Steps = append(out.Steps, viewStep(r))
		}
	}
	return nil, out, nil
}

type stopIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Force   bool   `json:"force,omitempty" jsonschema:"stop it even while a step runs in it (the step is ended)"`
}

type stopOut struct {
	Session sessionView `json:"session"`
	Note    string      `json:"note"`
}

func (s *Server) sandboxStop(ctx context.Context, _ *mcp.CallToolRequest, in stopIn) (*mcp.CallToolResult, stopOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, stopOut{}, err
	}
	wasEnded := sess.Ended()
	if _, err := s.o.Sandbox.Stop(ctx, sess, in.Force); err != nil {
		return nil, stopOut{}, err
	}
	if sess, err = s.o.Sandbox.Store.Get(ctx, sess.ID); err != nil {
		return nil, stopOut{}, err
	}
	note := "stopped; its evidence stays in " + sess.RunDir + " and its change requests stay"
	if wasEnded {
		note = "it had already ended (" + sess.Status + ")"
	}
	return nil, stopOut{Session: viewSession(sess), Note: note}, nil
}

// --- steps

// execIn is sandbox_exec's input.
type execIn struct {
	Session        string   `json:"session" jsonschema:"the sandbox's ID"`
	Command        string   `json:"command,omitempty" jsonschema:"a shell command line, run by /bin/sh -c in the sandbox (give this or argv)"`
	Argv           []string `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Workdir        string   `json:"workdir,omitempty" jsonschema:"directory to run in, relative to the worktree (default: its top)"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"end the command after this many seconds (default 600)"`
	Env            []string `json:"env,omitempty" jsonschema:"names of variables of the server's environment to pass to the command (names only: their values are taken from the server and masked in the output)"`
	Name           string   `json:"name,omitempty" jsonschema:"the step's name (letters, digits, . _ -); default: from the command's words"`
	Background     bool     `json:"background,omitempty" jsonschema:"return the step number at once and let the command run on (a server, a watcher): step_status, step_logs and step_kill follow it; no timeout unless timeout_seconds is given"`
}

// execOut is how a step ended, with its output cut to OutputCap a stream.
type execOut struct {
	Step     int    `json:"step" jsonschema:"the step's number in the sandbox (step_status, step_logs)"`
	Name     string `json:"name"`
	State    string `json:"state" jsonschema:"finished, or running for a background step"`
	ExitCode *int   `json:"exit_code" jsonschema:"the command's exit status; null while a background step runs"`
	// Background: the step runs on; FollowAlong is how the user watches it.
	Background  bool     `json:"background,omitempty"`
	FollowAlong []string `json:"follow_along,omitempty" jsonschema:"for a background step: the command the user follows it with"`
	Signal      string   `json:"signal,omitempty"`
	TimedOut    bool     `json:"timed_out,omitempty"`
	OOMKilled   bool     `json:"oom_killed,omitempty"`
	DurationMS  int64    `json:"duration_ms"`
	Stdout      string   `json:"stdout"`
	Stderr      string   `json:"stderr"`
	StdoutBytes int64    `json:"stdout_bytes"`
	StderrBytes int64    `json:"stderr_bytes"`
	// Cut: a stream was longer than OutputCap; its whole log is in the evidence.
	Cut        bool   `json:"cut" jsonschema:"a stream was longer than output_cap: the middle is left out here (read it with step_logs)"`
	OutputCap  int    `json:"output_cap"`
	StdoutPath string `json:"stdout_path"`
	StderrPath string `json:"stderr_path"`
}

func (s *Server) sandboxExec(ctx context.Context, req *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	sess, o, err := s.execOptions(ctx, in)
	if err != nil {
		return nil, execOut{}, err
	}
	if in.Background {
		return s.startStep(ctx, sess, o)
	}
	return s.runStep(ctx, req, sess, o)
}

// startStep starts a background step and returns it running.
func (s *Server) startStep(ctx context.Context, sess *store.Session, o sandbox.ExecOptions) (*mcp.CallToolResult, execOut, error) {
	seq, err := s.o.Sandbox.ExecDetached(ctx, sess, o)
	if err != nil {
		return nil, execOut{}, err
	}
	row, err := s.o.Sandbox.Step(ctx, sess, seq)
	if err != nil {
		return nil, execOut{}, err
	}
	v := s.o.Sandbox.ViewStep(row)
	out := execOut{Step: seq, Name: row.Name, State: row.State, ExitCode: row.ExitCode, Background: true, OutputCap: OutputCap,
		StdoutPath: v.StdoutPath, StderrPath: v.StderrPath, Signal: row.Signal, TimedOut: row.TimedOut,
		FollowAlong: []string{s.xmodeCommand("sandbox", "logs", sess.ID, strconv.Itoa(seq), "--follow")}}
	if v.DurationMS != nil {
		out.DurationMS = *v.DurationMS
	}
	text := fmt.Sprintf("step %d (%s) runs in the background (%s): step_status and step_logs (session %s, step %d) read it, step_kill ends it; the user follows it with: %s\n",
		seq, row.Name, row.State, sess.ID, seq, out.FollowAlong[0])
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// execOptions checks sandbox_exec's input and makes the step's options.
func (s *Server) execOptions(ctx context.Context, in execIn) (*store.Session, sandbox.ExecOptions, error) {
	var o sandbox.ExecOptions
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, o, err
	}
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return nil, o, fail.Usagef("give command (a shell line) or argv (no shell), not both")
	case in.Command != "":
		if strings.ContainsRune(in.Command, 0) {
			return nil, o, fail.Usagef("command holds a NUL byte, which no shell can take")
		}
		o.Argv = []string{"/bin/sh", "-c", in.Command}
		if in.Name == "" {
			o.Name, _ = evidence.StepName("", strings.Fields(in.Command))
		}
	case len(in.Argv) > 0:
		for _, a := range in.Argv {
			if strings.ContainsRune(a, 0) {
				return nil, o, fail.Usagef("argv holds a NUL byte, which no program can take")
			}
		}
		o.Argv = in.Argv
	default:
		return nil, o, fail.Usagef("give the command to run: command (a shell line, e.g. \"make test\") or argv ([\"make\", \"test\"])")
	}
	if in.Name != "" {
		o.Name = in.Name
	}
	switch {
	case in.TimeoutSeconds < 0 || in.TimeoutSeconds > 7*24*3600:
		return nil, o, fail.Usagef("timeout_seconds %d: give 1 to 604800 (default 600)", in.TimeoutSeconds)
	case in.TimeoutSeconds == 0 && !in.Background:
		o.Timeout = DefaultTimeout
	case in.TimeoutSeconds == 0:
		// A background step (a server) runs until it is ended or the
		// sandbox is.
	default:
		o.Timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	o.Workdir = in.Workdir
	lookup := s.o.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, name := range in.Env {
		if name == "" || strings.ContainsAny(name, "= \t\n\x00") {
			return nil, o, fail.Usagef("env %q: give a variable's name only (its value comes from the server's environment); for a value of your own, set it in command (NAME=value cmd)", name)
		}
		v, ok := lookup(name)
		if !ok {
			return nil, o, fail.NotFoundf("env %s: the server's environment has no %s (the user sets it where the server starts)", name, name)
		}
		o.SecretEnv = append(o.SecretEnv, name+"="+v)
	}
	return sess, o, nil
}

// runStep runs a step to its end: progress to a client that asked for it,
// Ctrl-C's interrupt to the step when the call is cancelled.
func (s *Server) runStep(ctx context.Context, req *mcp.CallToolRequest, sess *store.Session, o sandbox.ExecOptions) (*mcp.CallToolResult, execOut, error) {
	// The step's context: cancelled, with the interrupt of a Ctrl-C as its
	// cause, when the call is (notifications/cancelled, a client gone, the
	// server stopping), so the step's processes get SIGINT, then KILL.
	stepCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		cancel(&engine.Interrupt{Signal: syscall.SIGINT})
	})
	defer stop()
	if token := req.Params.GetProgressToken(); token != nil {
		// What the step prints is counted for the client's progress only:
		// a live copy costs each step a goroutine a stream.
		var outBytes, errBytes atomic.Int64
		o.LiveStdout, o.LiveStderr = countingWriter{&outBytes}, countingWriter{&errBytes}
		done := make(chan struct{})
		defer close(done)
		go s.progress(ctx, req.Session, token, &outBytes, &errBytes, done)
	}
	res, err := s.o.Sandbox.Exec(stepCtx, sess, o)
	if res == nil {
		return nil, execOut{}, err
	}
	out := execOut{
		Step: res.Seq, Name: res.Name, State: "finished", ExitCode: ptr(res.ExitCode), Signal: res.Signal, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled,
		DurationMS: res.DurationMS, OutputCap: OutputCap, StdoutPath: res.StdoutPath, StderrPath: res.StderrPath,
	}
	var cut1, cut2 bool
	out.Stdout, out.StdoutBytes, cut1 = s.capped(sess, res, evidence.StdoutFile)
	out.Stderr, out.StderrBytes, cut2 = s.capped(sess, res, evidence.StderrFile)
	out.Cut = cut1 || cut2
	var text strings.Builder
	fmt.Fprintf(&text, "step %d (%s): exit %d", out.Step, out.Name, res.ExitCode)
	switch {
	case out.TimedOut:
		text.WriteString(" (timed out)")
	case out.OOMKilled:
		text.WriteString(" (killed: out of memory)")
	case out.Signal != "":
		text.WriteString(" (" + out.Signal + ")")
	}
	fmt.Fprintf(&text, " in %s\n", time.Duration(out.DurationMS)*time.Millisecond)
	for _, st := range []struct {
		name, text string
		n          int64
	}{{"stdout", out.Stdout, out.StdoutBytes}, {"stderr", out.Stderr, out.StderrBytes}} {
		fmt.Fprintf(&text, "--- %s (%d bytes) ---\n%s", st.name, st.n, st.text)
		if st.text != "" && !strings.HasSuffix(st.text, "\n") {
			text.WriteString("\n")
		}
	}
	if out.Cut {
		fmt.Fprintf(&text, "[output cut to %d bytes a stream; the whole logs: step_logs (session %s, step %d), or %s and %s]\n", OutputCap, sess.ID, out.Step, out.StdoutPath, out.StderrPath)
	}
	if err != nil {
		// The command ran; some of its evidence could not be kept.
		fmt.Fprintf(&text, "[xmode: %v]\n", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.String()}}}, out, nil
}

// progress tells the client every ProgressEvery how long the step has run
// and how much it has printed, until done.
func (s *Server) progress(ctx context.Context, ss *mcp.ServerSession, token any, out, errs *atomic.Int64, done <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(s.o.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case now := <-t.C:
			el := now.Sub(start)
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: el.Seconds(),
				Message: fmt.Sprintf("running for %s; %d bytes on stdout, %d on stderr", el.Round(time.Second), out.Load(), errs.Load()),
			})
		}
	}
}

// countingWriter counts what a step prints, for progress.
type countingWriter struct{ n *atomic.Int64 }

func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// capped reads one of a step's logs for a reply: whole up to OutputCap,
// else its first outputHead bytes and its last OutputCap-outputHead, with a
// line saying what was left out.
func (s *Server) capped(sess *store.Session, res *evidence.Result, file string) (string, int64, bool) {
	f, err := evidence.Open(s.o.Sandbox.Guard, sess.RunID, res.Seq, res.Name, file)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, false
	}
	size := st.Size()
	if size <= OutputCap {
		b, _ := io.ReadAll(io.LimitReader(f, OutputCap))
		return string(b), size, false
	}
	head := make([]byte, outputHead)
	n, _ := io.ReadFull(f, head)
	tail := make([]byte, OutputCap-outputHead)
	m, _ := f.ReadAt(tail, size-int64(len(tail)))
	return fmt.Sprintf("%s\n[xmode: %d bytes left out here: the output is %d bytes, cut to its first %d and last %d]\n%s",
		head[:n], size-int64(n)-int64(m), size, n, m, tail[:m]), size, true
}

type stepIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Step    int    `json:"step" jsonschema:"the step's number (sandbox_exec and the file tools return it; sandbox_show lists them)"`
}

type stepStatusOut struct {
	stepView
	Running     bool   `json:"running"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	StdoutPath  string `json:"stdout_path"`
	StderrPath  string `json:"stderr_path"`
	Evidence    string `json:"evidence" jsonschema:"the step's evidence directory"`
}

// step is step seq of the session (of its own steps: a shared run's other
// sessions' are not in its scope).
func (s *Server) step(ctx context.Context, sessionID string, seq int) (*store.Session, store.StepRow, error) {
	sess, err := s.scoped(ctx, sessionID)
	if err != nil {
		return nil, store.StepRow{}, err
	}
	row, err := s.o.Sandbox.Store.Step(ctx, sess.RunID, seq)
	if err != nil || row.SessionID != sess.ID {
		return nil, store.StepRow{}, fail.NotFoundf("sandbox %s has no step %d: sandbox_show lists its steps", sess.ID, seq)
	}
	return sess, row, nil
}

func (s *Server) stepStatus(ctx context.Context, _ *mcp.CallToolRequest, in stepIn) (*mcp.CallToolResult, stepStatusOut, error) {
	sess, row, err := s.step(ctx, in.Session, in.Step)
	if err != nil {
		return nil, stepStatusOut{}, err
	}
	out := stepStatusOut{stepView: viewStep(row), Running: row.Live(s.o.Sandbox.Now())}
	if dir, err := evidence.StepDir(s.o.Sandbox.Guard, row.RunID, row.Seq, row.Name); err == nil {
		out.Evidence, out.StdoutPath, out.StderrPath = dir, filepath.Join(dir, evidence.StdoutFile), filepath.Join(dir, evidence.StderrFile)
	}
	for _, l := range []struct {
		file string
		n    *int64
	}{{evidence.StdoutFile, &out.StdoutBytes}, {evidence.StderrFile, &out.StderrBytes}} {
		if f, err := evidence.Open(s.o.Sandbox.Guard, sess.RunID, row.Seq, row.Name, l.file); err == nil {
			if st, err := f.Stat(); err == nil {
				*l.n = st.Size()
			}
			f.Close()
		}
	}
	return nil, out, nil
}

type killIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Step    int    `json:"step" jsonschema:"the running step's number"`
	Signal  string `json:"signal,omitempty" jsonschema:"TERM (default), INT, HUP, QUIT or KILL"`
}

// killSignals are the signals step_kill sends: those `sandbox kill` takes
// that end a process.
var killSignals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
}

func (s *Server) stepKill(ctx context.Context, req *mcp.CallToolRequest, in killIn) (*mcp.CallToolResult, stepStatusOut, error) {
	name := strings.TrimPrefix(strings.ToUpper(in.Signal), "SIG")
	if name == "" {
		name = "TERM"
	}
	sig, ok := killSignals[name]
	if !ok {
		return nil, stepStatusOut{}, fail.Usagef("signal %q: give TERM (the default), INT, HUP, QUIT or KILL", in.Signal)
	}
	sess, _, err := s.step(ctx, in.Session, in.Step)
	if err != nil {
		return nil, stepStatusOut{}, err
	}
	if err := s.o.Sandbox.KillStep(ctx, sess, in.Step, sig); err != nil {
		return nil, stepStatusOut{}, err
	}
	return s.stepStatus(ctx, req, stepIn{Session: in.Session, Step: in.Step})
}

type logsIn struct {
	Session  string `json:"session" jsonschema:"the sandbox's ID"`
	Step     int    `json:"step" jsonschema:"the step's number"`
	Stream   string `json:"stream,omitempty" jsonschema:"stdout (default) or stderr"`
	Tail     int64  `json:"tail,omitempty" jsonschema:"return the last this many bytes (default 16384), unless offset is given"`
	Offset   *int64 `json:"offset,omitempty" jsonschema:"return from this byte on (next_offset of an earlier call)"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"the most to return (default and at most 1048576)"`
}

type logsOut struct {
	Step       int    `json:"step"`
	Stream     string `json:"stream"`
	State      string `json:"state" jsonschema:"the step's state: running, finished or lost"`
	Offset     int64  `json:"offset" jsonschema:"where content starts in the log"`
	NextOffset int64  `json:"next_offset" jsonschema:"where the next read goes on"`
	Size       int64  `json:"size" jsonschema:"the log's size now"`
	Content    string `json:"content"`
	// EOF: nothing more will come (the step has ended and all was read).
	EOF bool `json:"eof"`
}

func (s *Server) stepLogs(ctx context.Context, _ *mcp.CallToolRequest, in logsIn) (*mcp.CallToolResult, logsOut, error) {
	file := evidence.StdoutFile
	switch in.Stream {
	case "", "stdout":
		in.Stream = "stdout"
	case "stderr":
		file = evidence.StderrFile
	default:
		return nil, logsOut{}, fail.Usagef("stream %q: stdout or stderr", in.Stream)
	}
	if in.MaxBytes < 0 || in.Tail < 0 || in.Offset != nil && *in.Offset < 0 {
		return nil, logsOut{}, fail.Usagef("tail, offset and max_bytes are byte counts: 0 or more")
	}
	limit := in.MaxBytes
	if limit == 0 || limit > LogsCap {
		limit = LogsCap
	}
	_, row, err := s.step(ctx, in.Session, in.Step)
	if err != nil {
		return nil, logsOut{}, err
	}
	fw, err := evidence.Follow(s.o.Sandbox.Store, s.o.Sandbox.Guard, s.o.Sandbox.Now, row, file)
	if err != nil {
		return nil, logsOut{}, err
	}
	defer fw.Close()
	// Whether it has ended is asked before the log is read: then what is
	// read is all there is.
	ended, err := fw.Ended(ctx)
	if err != nil {
		return nil, logsOut{}, err
	}
	row = fw.Step()
	size, err := fw.Size(0)
	if err != nil {
		return nil, logsOut{}, err
	}
	var off int64
	if in.Offset != nil {
		off = min(*in.Offset, size)
	} else {
		tail := in.Tail
		if tail == 0 {
			tail = 16 << 10
		}
		off = max(0, size-min(tail, limit))
	}
	_ = fw.Seek(0, off)
	buf := make([]byte, min(limit, size-off))
	n, err := fw.Read(0, buf)
	if err != nil {
		return nil, logsOut{}, err
	}
	out := logsOut{Step: row.Seq, Stream: in.Stream, State: row.State, Offset: off, NextOffset: off + int64(n), Size: size, Content: string(buf[:n])}
	out.EOF = ended && out.NextOffset >= size
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("step %d %s, bytes %d-%d of %d (%s)%s\n%s",
		out.Step, out.Stream, out.Offset, out.NextOffset, out.Size, out.State, map[bool]string{true: ", all of it", false: ""}[out.EOF], out.Content)}}}, out, nil
}

// --- files

// fileStepOut is what every file tool says of its step.
type hashView struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

func viewHash(h *evidence.FileHash) *hashView {
	if h == nil {
		return nil
	}
	return &hashView{SHA256: h.SHA256, Bytes: h.Size}
}

func stepOf(r *evidence.Result) int {
	if r == nil {
		return 0
	}
	return r.Seq
}

type readIn struct {
	Session   string `json:"session" jsonschema:"the sandbox's ID"`
	Path      string `json:"path" jsonschema:"the file's path, relative to the worktree (e.g. src/main.go)"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"the first line to return, from 1 (default 1)"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"the last line to return (default: the last)"`
}

type readOut struct {
	Path       string    `json:"path"`
	Content    string    `json:"content"`
	StartLine  int       `json:"start_line"`
	EndLine    int       `json:"end_line"`
	TotalLines int       `json:"total_lines"`
	NextLine   int       `json:"next_line" jsonschema:"where to go on: the read stopped at 1 MiB; 0 when the range was read whole"`
	Binary     bool      `json:"binary" jsonschema:"not text: content is empty (inspect it with sandbox_exec, e.g. od or base64)"`
	File       *hashView `json:"file"`
	Step       int       `json:"step"`
}

func (s *Server) fileRead(ctx context.Context, _ *mcp.CallToolRequest, in readIn) (*mcp.CallToolResult, readOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, readOut{}, err
	}
	r, err := s.o.Sandbox.ReadFile(ctx, sess, sandbox.ReadOptions{Path: in.Path, StartLine: in.StartLine, EndLine: in.EndLine})
	if err != nil {
		return nil, readOut{}, err
	}
	out := readOut{Path: r.Path, Content: r.Content, StartLine: r.StartLine, EndLine: r.EndLine, TotalLines: r.TotalLines,
		NextLine: r.NextLine, Binary: r.Binary, File: viewHash(r.Before), Step: stepOf(r.Step)}
	text := out.Content
	switch {
	case out.Binary:
		text = fmt.Sprintf("[%s is not text (%d bytes, sha256 %s): inspect it with sandbox_exec]", out.Path, out.File.Bytes, out.File.SHA256)
	case out.NextLine > 0:
		text += fmt.Sprintf("\n[lines %d-%d of %d; the read stopped at 1 MiB: go on with start_line %d]", out.StartLine, out.EndLine, out.TotalLines, out.NextLine)
	case out.StartLine == 0 && out.TotalLines > 0:
		text = fmt.Sprintf("[%s has %d lines: nothing in lines %d-%d]", out.Path, out.TotalLines, in.StartLine, in.EndLine)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

type listFilesIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Path    string `json:"path,omitempty" jsonschema:"a directory, relative to the worktree (default: its top)"`
	Pattern string `json:"pattern,omitempty" jsonschema:"a glob matched against paths under path: * and ? within a name, ** across directories (e.g. **/*_test.go); none lists path's own entries"`
}

type listFilesOut struct {
	Entries   []sandbox.FileEntry `json:"entries"`
	Truncated bool                `json:"truncated" jsonschema:"there are more than 2000: narrow path or pattern"`
	Step      int                 `json:"step"`
}

func (s *Server) fileList(ctx context.Context, _ *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, listFilesOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, listFilesOut{}, err
	}
	l, err := s.o.Sandbox.ListFiles(ctx, sess, sandbox.ListOptions{Path: in.Path, Pattern: in.Pattern})
	if err != nil {
		return nil, listFilesOut{}, err
	}
	out := listFilesOut{Entries: l.Entries, Truncated: l.Truncated, Step: stepOf(l.Step)}
	if out.Entries == nil {
		out.Entries = []sandbox.FileEntry{}
	}
	return nil, out, nil
}

type writeIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Path    string `json:"path" jsonschema:"the file's path, relative to the worktree"`
	Content string `json:"content" jsonschema:"the whole new content of the file (at most 8 MiB)"`
}

type changeOut struct {
	Path         string    `json:"path"`
	Created      bool      `json:"created,omitempty"`
	Replacements int       `json:"replacements,omitempty"`
	Removed      int       `json:"removed,omitempty"`
	Before       *hashView `json:"before" jsonschema:"the file before (null: there was none)"`
	After        *hashView `json:"after" jsonschema:"the file after (null: there is none)"`
	Step         int       `json:"step" jsonschema:"the step that recorded it"`
}

func viewChange(f *sandbox.FileStep) changeOut {
	return changeOut{Path: f.Path, Created: f.Created, Replacements: f.Replacements, Removed: f.Removed,
		Before: viewHash(f.Before), After: viewHash(f.After), Step: stepOf(f.Step)}
}

func (s *Server) fileWrite(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, changeOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, changeOut{}, err
	}
	f, err := s.o.Sandbox.WriteFile(ctx, sess, in.Path, []byte(in.Content))
	if err != nil {
		return nil, changeOut{}, err
	}
	return nil, viewChange(f), nil
}

type editIn struct {
	Session    string `json:"session" jsonschema:"the sandbox's ID"`
	Path       string `json:"path" jsonschema:"the file's path, relative to the worktree"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, as file_read shows it (whitespace and line breaks included)"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence (default: old_string must occur exactly once)"`
}

func (s *Server) fileEdit(ctx context.Context, _ *mcp.CallToolRequest, in editIn) (*mcp.CallToolResult, changeOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, changeOut{}, err
	}
	f, err := s.o.Sandbox.EditFile(ctx, sess, sandbox.EditOptions{Path: in.Path, Old: in.OldString, New: in.NewString, ReplaceAll: in.ReplaceAll})
	if err != nil {
		return nil, changeOut{}, err
	}
	return nil, viewChange(f), nil
}

type deleteIn struct {
	Session   string `json:"session" jsonschema:"the sandbox's ID"`
	Path      string `json:"path" jsonschema:"the path to delete, relative to the worktree"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"delete a directory and everything in it"`
}

func (s *Server) fileDelete(ctx context.Context, _ *mcp.CallToolRequest, in deleteIn) (*mcp.CallToolResult, changeOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, changeOut{}, err
	}
	f, err := s.o.Sandbox.DeleteFile(ctx, sess, in.Path, in.Recursive)
	if err != nil {
		return nil, changeOut{}, err
	}
	return nil, viewChange(f), nil
}

// --- the change

type diffIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Stat    bool   `json:"stat,omitempty" jsonschema:"the stat alone, without the patch"`
}

type fileStatView struct {
	Path       string `json:"path"`
	OldPath    string `json:"old_path,omitempty"`
	Status     string `json:"status" jsonschema:"A added, M modified, D deleted, R renamed, T type changed"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

type statView struct {
	Files      int            `json:"files"`
	Insertions int            `json:"insertions"`
	Deletions  int            `json:"deletions"`
	PerFile    []fileStatView `json:"per_file"`
}

func viewStat(st *changes.Stat) statView {
	v := statView{PerFile: []fileStatView{}}
	if st == nil {
		return v
	}
	v.Files, v.Insertions, v.Deletions = st.Files, st.Insertions, st.Deletions
	for _, f := range st.PerFile {
		v.PerFile = append(v.PerFile, fileStatView{Path: f.Path, OldPath: f.OldPath, Status: f.Status, Insertions: f.Insertions, Deletions: f.Deletions, Binary: f.Binary})
	}
	return v
}

type diffOut struct {
	BaseCommit string   `json:"base_commit"`
	Commits    []string `json:"commits" jsonschema:"your commits on top of the base: id and subject"`
	Stat       statView `json:"stat"`
	Patch      string   `json:"patch"`
	PatchCut   bool     `json:"patch_cut" jsonschema:"the patch was longer than 256 KiB and is cut (the user sees all of it: xmode sandbox diff)"`
	LeftOut    []string `json:"left_out" jsonschema:"paths left out, and why (paths git refuses to track)"`
	Warnings   []string `json:"warnings"`
}

func (s *Server) sandboxDiff(ctx context.Context, _ *mcp.CallToolRequest, in diffIn) (*mcp.CallToolResult, diffOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, diffOut{}, err
	}
	want := changes.WantStat
	if !in.Stat {
		want |= changes.WantPatch
	}
	sn, err := s.o.Changes.Snapshot(ctx, sess, want)
	if err != nil {
		return nil, diffOut{}, err
	}
	defer sn.Close()
	st, err := sn.Stat(ctx)
	if err != nil {
		return nil, diffOut{}, err
	}
	out := diffOut{BaseCommit: sn.Base.String(), Commits: []string{}, Stat: viewStat(st), LeftOut: []string{}, Warnings: append([]string{}, sn.Warnings...)}
	for _, c := range sn.Commits {
		subject, _, _ := strings.Cut(c.Message, "\n")
		out.Commits = append(out.Commits, c.ID.String()[:12]+" "+subject)
	}
	for _, sk := range sn.Skipped {
		out.LeftOut = append(out.LeftOut, sk.Path+": "+sk.Reason)
	}
	if !in.Stat {
		w := &capWriter{max: PatchCap}
		if err := sn.Patch(ctx, w, false); err != nil && !errors.Is(err, errCapped) {
			return nil, diffOut{}, err
		}
		out.Patch, out.PatchCut = w.buf.String(), w.cut
	}
	text := fmt.Sprintf("%d files changed, %d insertions(+), %d deletions(-) against %s\n", out.Stat.Files, out.Stat.Insertions, out.Stat.Deletions, out.BaseCommit)
	if in.Stat {
		for _, f := range out.Stat.PerFile {
			text += fmt.Sprintf(" %s %s +%d -%d\n", f.Status, f.Path, f.Insertions, f.Deletions)
		}
	}
	text += out.Patch
	if out.PatchCut {
		text += fmt.Sprintf("\n[patch cut at %d bytes; the user sees all of it with xmode sandbox diff %s]\n", PatchCap, sess.ID)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

// errCapped ends a write past a capWriter's cap.
var errCapped = errors.New("output capped")

// capWriter keeps the first max bytes written to it, then fails.
type capWriter struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max - w.buf.Len()
	if len(p) > room {
		w.buf.Write(p[:max(room, 0)])
		w.cut = true
		return max(room, 0), errCapped
	}
	return w.buf.Write(p)
}

type crCreateIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	Title   string `json:"title,omitempty" jsonschema:"what the change does, in one line (default: the sandbox's title, else your last commit's subject)"`
	Message string `json:"message,omitempty" jsonschema:"for the reviewer: what you changed and why, and how you checked it"`
}

type crOut struct {
	ID        string      `json:"id"`
	Title     string      `json:"title"`
	Status    string      `json:"status" jsonschema:"open until the user approves or rejects it"`
	Session   string      `json:"session"`
	Stat      statView    `json:"stat"`
	Dir       string      `json:"dir" jsonschema:"its package: change.patch, manifest.json, evidence.json"`
	Review    []string    `json:"review" jsonschema:"the commands the user reviews it with: give the user these"`
	Reviews   []string    `json:"reviews" jsonschema:"decisions so far"`
	Steps     []crStep    `json:"steps" jsonschema:"the evidence: every step of the sandbox's run"`
	Patch     string      `json:"patch,omitempty"`
	PatchCut  bool        `json:"patch_cut,omitempty"`
	CreatedAt string      `json:"created_at"`
	Manifest  *manifestIn `json:"manifest,omitempty"`
}

type manifestIn struct {
	BaseCommit string `json:"base_commit"`
	Tree       string `json:"tree"`
	Message    string `json:"message"`
}

type crStep struct {
	Step   int      `json:"step"`
	Name   string   `json:"name"`
	Argv   []string `json:"argv"`
	Status string   `json:"status" jsonschema:"passed, failed, timed_out, oom_killed, killed or running"`
}

func (s *Server) crCreate(ctx context.Context, _ *mcp.CallToolRequest, in crCreateIn) (*mcp.CallToolResult, crOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, crOut{}, err
	}
	title := in.Title
	if title == "" {
		title = sess.Title
	}
	p, err := s.o.Changes.Create(ctx, sess, changes.CreateOptions{Title: title, Message: in.Message})
	if err != nil {
		return nil, crOut{}, err
	}
	return nil, s.viewCR(p, nil, nil), nil
}

type crShowIn struct {
	ChangeRequest string `json:"change_request" jsonschema:"the change request's ID (cr_…), from cr_create"`
	Patch         bool   `json:"patch,omitempty" jsonschema:"include the patch"`
}

func (s *Server) crShow(ctx context.Context, _ *mcp.CallToolRequest, in crShowIn) (*mcp.CallToolResult, crOut, error) {
	if in.ChangeRequest == "" {
		return nil, crOut{}, fail.Usagef("give the change request's ID (cr_create returns it)")
	}
	p, err := s.o.Changes.Open(ctx, in.ChangeRequest)
	if err == nil {
		// Only a change request of a session in scope: any other is not found.
		if _, err = s.scoped(ctx, p.SessionID); err != nil || p.ID != in.ChangeRequest {
			err = fail.NotFoundf("no change request %q of your sandboxes (give the whole ID cr_create returned)", in.ChangeRequest)
		}
	}
	if err != nil {
		return nil, crOut{}, err
	}
	ev, err := s.o.Changes.Evidence(p)
	if err != nil {
		return nil, crOut{}, err
	}
	var patch *capWriter
	if in.Patch {
		r, _, err := s.o.Changes.OpenFile(p, changes.PatchFile)
		if err != nil {
			return nil, crOut{}, err
		}
		patch = &capWriter{max: PatchCap}
		_, err = io.Copy(patch, r)
		r.Close()
		if err != nil && !errors.Is(err, errCapped) {
			return nil, crOut{}, err
		}
	}
	return nil, s.viewCR(p, ev, patch), nil
}

func (s *Server) viewCR(p *changes.Package, ev *changes.Evidence, patch *capWriter) crOut {
	x := "xmode"
	if s.o.StorageRootArg != "" {
		x += " --storage-root " + shellQuote(s.o.StorageRootArg)
	}
	out := crOut{ID: p.ID, Title: p.Title, Status: p.Status, Session: p.SessionID, Dir: p.Dir, CreatedAt: stamp(p.CreatedAt),
		Review: []string{
			x + " cr show " + p.ID + " --patch     # read it",
			x + " cr review " + p.ID + " --approve # or --reject, with --note",
			x + " cr export " + p.ID + " --repo REPO # a branch of it in your repository",
		},
		Reviews: []string{}, Steps: []crStep{}}
	if p.Manifest != nil {
		out.Stat = viewStat(p.Manifest.Stat)
		out.Manifest = &manifestIn{BaseCommit: p.Manifest.BaseCommit, Tree: p.Manifest.Tree, Message: p.Manifest.Message}
	} else {
		out.Stat = viewStat(nil)
	}
	for _, r := range p.Reviews {
		out.Reviews = append(out.Reviews, fmt.Sprintf("%s by %s at %s: %s", r.Decision, r.Reviewer, stamp(r.DecidedAt), r.Note))
	}
	if ev != nil {
		for _, st := range ev.Steps {
			argv := st.Argv
			if argv == nil {
				argv = []string{}
			}
			out.Steps = append(out.Steps, crStep{Step: st.Seq, Name: st.Name, Argv: argv, Status: st.Status})
		}
	}
	if patch != nil {
		out.Patch, out.PatchCut = patch.buf.String(), patch.cut
	}
	return out
}
