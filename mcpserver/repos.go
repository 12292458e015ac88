package mcpserver

import (
	"context"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
)

// Which repositories a client may name. The host's git fetches a
// repository with the user's credentials and network, which a sandbox
// (network none) does not have: a client naming http://127.0.0.1:PORT/ or
// any path the user can read would reach through the server what its
// sandbox cannot. So a client names only what the user allowed: a path
// in one of the client's roots, the server's working directory, or a
// repository XMODE_MCP_REPOS matches. Anything else — and an allowed one
// that cannot be read — is refused with one message, whatever happened
// underneath, so that a client learns nothing of what the host reaches;
// the cause goes to the server's log.

// repoRefused is the one answer to a repository the client may not have.
func repoRefused(given string) error {
	return fail.Refusedf("repository %q cannot be used: a client may name a path in its roots, the server's working directory, or a repository the user allowed in XMODE_MCP_REPOS, one that can be read; which it was, the server's log says — tell the user, or leave repository empty for the project you were opened in", given)
}

// repository is the repository a create checks out, if the client may
// have it: as given (a relative path taken from the client's first root,
// else the server's directory), else the client's first root, else the
// server's working directory.
func (s *Server) repository(roots []string, given string) (string, error) {
	if strings.ContainsRune(given, 0) {
		return "", fail.Usagef("repository: holds a NUL byte")
	}
	base := s.o.WorkDir
	if len(roots) > 0 {
		base = roots[0]
	}
	repo := given
	switch {
	case given == "":
		repo = base
	case isRemote(given) || filepath.IsAbs(given) || strings.HasPrefix(given, "file://"):
	default:
		repo = filepath.Join(base, given)
	}
	if why := s.disallowed(roots, repo); why != "" {
		s.logf("sandbox_create: repository %q refused: %s", given, why)
		return "", repoRefused(given)
	}
	return repo, nil
}

// isRemote: repo is reached over a network (a URL other than file://, or
// git's user@host:path), not a path of this machine.
func isRemote(repo string) bool {
	if scheme, _, ok := strings.Cut(repo, "://"); ok {
		return !strings.EqualFold(scheme, "file")
	}
	before, _, ok := strings.Cut(repo, ":")
	return ok && !strings.Contains(before, "/")
}

// disallowed says why a client may not have repo, "" when it may.
func (s *Server) disallowed(roots []string, repo string) string {
	pats := s.o.Sandbox.Cfg.MCPRepos
	if isRemote(repo) {
		if dotSegments(repo) {
			return "a URL with . or .. in its path"
		}
		for _, p := range pats {
			if matchPrefix(p, repo) {
				return ""
			}
		}
		return "no XMODE_MCP_REPOS pattern matches it"
	}
	p := repo
	if strings.HasPrefix(repo, "file://") {
		u, err := url.Parse(repo)
		if err != nil || u.Host != "" && u.Host != "localhost" {
			return "a file:// URL of another host"
		}
		p = u.Path
	}
	p = realPath(p)
	if p == realPath(s.o.WorkDir) && s.o.WorkDir != "" {
		return ""
	}
	for _, r := range roots {
		if under(realPath(r), p) {
			return ""
		}
	}
	for _, pat := range pats {
		if strings.HasPrefix(pat, "/") && matchPrefix(realPattern(pat), p) {
			return ""
		}
	}
	return "it is not the server's working directory (" + s.o.WorkDir + "), not in the client's roots " + strings.Join(roots, ", ") + ", and no XMODE_MCP_REPOS pattern matches " + p
}

// realPath is p absolute and clean, its links resolved as far as it exists
// (what git will read).
func realPath(p string) string {
	if p == "" {
		return ""
	}
	p, _ = filepath.Abs(p)
	return config.ResolveExisting(p)
}

// realPattern is a path pattern with the links of its leading literal
// components resolved, as realPath resolves what it is matched against.
func realPattern(pat string) string {
	parts := strings.Split(pat, "/")
	i := 0
	for i < len(parts) && !strings.ContainsAny(parts[i], `*?[\`) {
		i++
	}
	lit := strings.Join(parts[:i], "/")
	if lit == "" {
		return pat
	}
	if _, err := os.Lstat(lit); err != nil {
		return pat
	}
	return strings.Join(append([]string{realPath(lit)}, parts[i:]...), "/")
}

// under: p is dir or inside it.
func under(dir, p string) bool {
	if dir == "" {
		return false
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// matchPrefix reports whether pattern (path.Match's syntax) matches s or
// its leading /-separated components, as GOPRIVATE's patterns match
// module paths: /home/me/src matches every path under it, and
// https://github.com/me/* every repository of github.com/me.
func matchPrefix(pattern, s string) bool {
	pattern = strings.TrimSuffix(pattern, "/")
	n := strings.Count(pattern, "/") + 1
	parts := strings.SplitN(s, "/", n+1)
	if len(parts) < n {
		return false
	}
	ok, _ := path.Match(pattern, strings.Join(parts[:n], "/"))
	return ok
}

// dotSegments: a remote repository's path holds . or .. (percent-encoded
// too), which a server resolves to another path than the pattern saw.
func dotSegments(repo string) bool {
	p := repo
	if _, rest, ok := strings.Cut(repo, "://"); ok {
		p = rest
	} else if _, rest, ok := strings.Cut(repo, ":"); ok {
		p = rest
	}
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
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

// wantsRoots: sandbox_create needs the client's roots — to find the
// repository, or to know whether the client may have the path it named —
// the client has roots, and has not yet said what they are.
func wantsRoots(req *mcp.CallToolRequest, given string) bool {
	if isRemote(given) {
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

// askRoots asks a client of an older protocol for its roots: its file://
// ones, none when it does not answer within a few seconds.
func askRoots(ctx context.Context, ss *mcp.ServerSession) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := ss.ListRoots(ctx, nil)
	if err != nil {
		return nil
	}
	return fileRoots(res)
}

// clientRoots are the file:// roots the client gave in answer to
// rootsRequest.
func clientRoots(req *mcp.CallToolRequest) []string {
	if req == nil || req.Params == nil {
		return nil
	}
	res, ok := req.Params.InputResponses[rootsRequest].(*mcp.ListRootsResult)
	if !ok {
		return nil
	}
	return fileRoots(res)
}

// fileRoots are the paths of the file:// roots, in the client's order.
func fileRoots(res *mcp.ListRootsResult) []string {
	if res == nil {
		return nil
	}
	var roots []string
	for _, r := range res.Roots {
		u, err := url.Parse(r.URI)
		if err == nil && u.Scheme == "file" && u.Path != "" && (u.Host == "" || u.Host == "localhost") {
			roots = append(roots, u.Path)
		}
	}
	return roots
}
