package mcpserver

import (
	"bytes"
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
	"github.com/xmode/xmode/store"
)

// The sandbox's life: sandbox_create, sandbox_list, sandbox_show,
// sandbox_stop.

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
	Network    string `json:"network,omitempty" jsonschema:"its network: none, allow or open (through xmode's egress proxy: network_policy shows the rules), or a docker network"`
	Worktree   string `json:"worktree" jsonschema:"the worktree's path on the server's machine (not for your own tools: use the file tools)"`
	Evidence   string `json:"evidence" jsonschema:"the directory of its evidence"`
	CreatedAt  string `json:"created_at"`
	ExpiresAt  string `json:"expires_at"`
	Client     string `json:"client,omitempty" jsonschema:"the MCP client that made it"`
}

func viewSession(sess *store.Session) sessionView {
	return sessionView{
		ID: sess.ID, Status: sess.Status, EndReason: sess.EndReason, Error: sess.Error, Title: sess.Title,
		Repository: sess.Repo, Ref: sess.Ref, BaseCommit: sess.BaseCommit, Engine: sess.Engine, Network: sess.Network,
		Worktree: sess.WorktreePath, Evidence: sess.RunDir, CreatedAt: stamp(sess.CreatedAt), ExpiresAt: stamp(sess.ExpiresAt),
		Client: sess.OriginClient,
	}
}

type createIn struct {
	Repository string   `json:"repository,omitempty" jsonschema:"the repository to check out: a local path or a git URL; default: the client's root (the project you were opened in), else the server's working directory"`
	Ref        string   `json:"ref,omitempty" jsonschema:"branch, tag or commit; default: the repository's HEAD branch"`
	Project    string   `json:"project,omitempty" jsonschema:"a project ID (with project machines: a warm checkout of that project)"`
	Title      string   `json:"title,omitempty" jsonschema:"what the sandbox is for, in a few words (the change request's default title)"`
	Image      string   `json:"image,omitempty" jsonschema:"the image a docker sandbox runs, one with the project's toolchain (e.g. golang:1.26); default: the user's XMODE_SANDBOX_IMAGE. Refused when sandboxes run on the host"`
	Network    string   `json:"network,omitempty" jsonschema:"the sandbox's network: none; allow (only the hosts in allow) or open (every host but deny rules and the block list), both through xmode's egress proxy, which records every connection (network_log). Default: the user's configuration; more than it gives is refused unless the user lets clients widen the network"`
	Allow      []string `json:"allow,omitempty" jsonschema:"with network allow: what the sandbox may reach (host, *.host for the names below it, host:port, CIDR); refused unless the user lets clients widen the network"`
	Deny       []string `json:"deny,omitempty" jsonschema:"what the sandbox may never reach (host, *.host, host:port, CIDR); wins over every allow rule"`
}

type createOut struct {
	Session sessionView `json:"session"`
	// FollowAlong: what the user runs to watch and review.
	FollowAlong []string `json:"follow_along" jsonschema:"commands for the user to watch and review your work: tell the user these"`
	Warnings    []string `json:"warnings" jsonschema:"what the user should know: tell the user these"`
}

func (s *Server) addSandboxCreate() {
	add(s, &mcp.Tool{Name: "sandbox_create", Title: "Create a sandbox",
		Description: `Create a sandbox for a repository: a fresh checkout of its committed state (a branch, tag or commit) in which sandbox_exec and the file tools work, each call recorded as evidence. Returns the session ID every other tool takes, the base commit, and follow_along: the commands the user runs to watch and review your work — tell the user those. Uncommitted changes in the repository are not in the sandbox (a warning says so). Commands run where the user configured xmode's engine: a docker container — hardened, with limits and no network, unless the user opted out — or, with the host engine, on the user's machine as the user; warnings say plainly what the sandbox lacks (tell the user). image picks a docker sandbox's image. The repository is one the user allowed: the project you were opened in unless the user allowed others.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)}}, s.sandboxCreate)
}

func (s *Server) sandboxCreate(ctx context.Context, req *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, createOut, error) {
	if err := checkTitle(in.Title); err != nil {
		return nil, createOut{}, err
	}
	if err := checkTransport(in.Repository); err != nil {
		return nil, createOut{}, err
	}
	roots := clientRoots(req)
	if req.Session != nil && wantsRoots(req, in.Repository) {
		if multiRoundTrip(req.Session) {
			// Ask for the client's roots first; the call comes again with
			// them (a server may not send a request while serving one).
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{rootsRequest: &mcp.ListRootsParams{}}}, createOut{}, nil
		}
		// An older protocol: ask directly, and do without the roots of a
		// client that does not answer.
		roots = askRoots(ctx, req.Session)
	}
	repo, err := s.repository(roots, in.Repository)
	if err != nil {
		return nil, createOut{}, err
	}
	// A service of this call's own, so the notes a create makes (uncommitted
	// changes left out) come back to this caller only.
	svc := *s.o.Sandbox
	ov, sources, err := s.createNetwork(in)
	if err != nil {
		return nil, createOut{}, err
	}
	if in.Image != "" {
		ov["XMODE_SANDBOX_IMAGE"] = config.Flag{Name: "image", Value: in.Image}
	}
	if len(ov) > 0 {
		if svc.Cfg, err = s.createConfig(ov, in.Image); err != nil {
			return nil, createOut{}, err
		}
	}
	var notes bytes.Buffer
	svc.Notices, svc.Progress, svc.Verbose, svc.Log = &notes, nil, nil, nil
	sess, err := svc.Create(ctx, sandbox.CreateOptions{
		Repo: repo, Ref: in.Ref, Project: in.Project, Title: in.Title, Egress: sources,
		Origin: store.OriginMCP, OriginClient: clientOf(req.Session),
	})
	if re := (*sandbox.RepoError)(nil); errors.As(err, &re) {
		// Whether it could be reached is not the client's to learn.
		s.logf("sandbox_create: repository %q (%s) could not be read: %v", in.Repository, repo, err)
		return nil, createOut{}, repoRefused(in.Repository)
	}
	if err != nil {
		return nil, createOut{}, err
	}
	out := createOut{Session: viewSession(sess), FollowAlong: s.followAlong(sess.ID), Warnings: noteLines(notes.String())}
	for _, gap := range svc.IsolationGaps(sess) {
		out.Warnings = append(out.Warnings, "this sandbox lacks "+gap)
	}
	s.logf("created %s (%s at %s) for %s", sess.ID, sess.Repo, sess.Ref, sess.OriginClient)
	return nil, out, nil
}

func (s *Server) followAlong(id string) []string {
	x := s.xmodeCommand()
	return []string{
		x + " sandbox logs " + id + " --follow   # each step as it runs",
		x + " sandbox diff " + id + "            # what changed so far",
		x + " sandbox shell " + id + "           # a shell in the sandbox",
	}
}

type listIn struct {
	All bool `json:"all,omitempty" jsonschema:"also the sandboxes that have ended"`
}

type listOut struct {
	Sandboxes []sessionView `json:"sandboxes"`
}

func (s *Server) addSandboxList() {
	add(s, &mcp.Tool{Name: "sandbox_list", Title: "List sandboxes",
		Description: `List your sandboxes (the ones MCP clients made for this user): ID, status, repository, ref, title, when it expires. Open ones only, unless all is set.`,
		Annotations: readOnly}, s.sandboxList)
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
type showOut struct {
	Session sessionView `json:"session"`
	Steps   []stepView  `json:"steps"`
	Ports   []portOut   `json:"ports" jsonschema:"its published ports (sandbox_port)"`
}

func (s *Server) addSandboxShow() {
	add(s, &mcp.Tool{Name: "sandbox_show", Title: "Show a sandbox",
		Description: `Show one sandbox and the steps recorded in it so far (commands and file operations: number, name, state, exit code, duration).`,
		Annotations: readOnly}, s.sandboxShow)
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
	out := showOut{Session: viewSession(sess), Steps: []stepView{}, Ports: []portOut{}}
	ports, err := s.o.Sandbox.Ports(ctx, sess, false)
	if err != nil {
		return nil, showOut{}, err
	}
	for _, p := range ports {
		out.Ports = append(out.Ports, portOut{Session: sess.ID, Port: p.Port, URL: sandbox.PortURL(p), HostAddr: p.HostAddr, Forwarded: p.Owner != ""})
	}
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

func (s *Server) addSandboxStop() {
	add(s, &mcp.Tool{Name: "sandbox_stop", Title: "Stop a sandbox",
		Description: `Stop a sandbox: its container and worktree go, its evidence and change requests stay. Only when the user no longer needs it. A step still running (another call's) makes it refuse unless force is set, which ends that step.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}}, s.sandboxStop)
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

type extendIn struct {
	Session string `json:"session" jsonschema:"the sandbox's ID"`
	TTL     string `json:"ttl,omitempty" jsonschema:"how long from now the sandbox lives, a duration such as 90m or 4h (default: the configured lifetime, XMODE_SANDBOX_TTL; at most XMODE_SANDBOX_MAX_TTL)"`
}

type extendOut struct {
	Session sessionView `json:"session"`
	Note    string      `json:"note"`
}

func (s *Server) addSandboxExtend() {
	add(s, &mcp.Tool{Name: "sandbox_extend", Title: "Extend a sandbox's life",
		Description: `Push back when a sandbox expires: it lives ttl from now (default: the configured lifetime). An expired sandbox is stopped and its uncommitted work goes with it, so extend one whose work is not done — do not create a new one instead. Returns the sandbox with its new expires_at. A sandbox that has ended cannot be extended.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}}, s.sandboxExtend)
}

func (s *Server) sandboxExtend(ctx context.Context, _ *mcp.CallToolRequest, in extendIn) (*mcp.CallToolResult, extendOut, error) {
	sess, err := s.scoped(ctx, in.Session)
	if err != nil {
		return nil, extendOut{}, err
	}
	d := s.o.Sandbox.Cfg.TTL
	if in.TTL != "" {
		if d, err = config.ParseDuration(in.TTL); err != nil {
			return nil, extendOut{}, fail.Usagef("ttl: %v", err)
		}
	}
	if sess, err = s.o.Sandbox.Extend(ctx, sess, d); err != nil {
		return nil, extendOut{}, err
	}
	return nil, extendOut{Session: viewSession(sess), Note: "it now expires at " + stamp(sess.ExpiresAt) + ", " + humanTTL(d) + " from now"}, nil
}
