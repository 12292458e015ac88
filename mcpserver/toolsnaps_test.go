package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// -update rewrites testdata/toolsnaps from the tools as they are.
var update = flag.Bool("update", false, "rewrite testdata/toolsnaps from the server's tools")

// listTools is tools/list of a server with no services, through the Go
// SDK's client over an in-memory transport.
func listTools(t *testing.T) []*mcp.Tool {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	s := New(Options{Version: "test"})
	ss, err := s.mcp.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "snap", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Tools
}

// Every tool's definition as a client sees it — name, title, description,
// input and output schemas, annotations — is the one snapshotted in
// testdata/toolsnaps/NAME.json (as github/github-mcp-server's
// __toolsnaps__): a change to what a client is told is a change to a file
// a reviewer sees. `go test ./mcpserver -run TestToolSnaps -update`
// rewrites them; a snapshot of a tool that no longer exists fails too.
func TestToolSnaps(t *testing.T) {
	dir := filepath.Join("testdata", "toolsnaps")
	seen := map[string]bool{}
	for _, tool := range listTools(t) {
		seen[tool.Name+".json"] = true
		got, err := json.MarshalIndent(tool, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		file := filepath.Join(dir, tool.Name+".json")
		if *update {
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no snapshot (%v): run go test ./mcpserver -run TestToolSnaps -update and review the new file", tool.Name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from its snapshot %s: if the change is meant, run go test ./mcpserver -run TestToolSnaps -update and review the diff\n got: %s", tool.Name, file, got)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			if *update {
				os.Remove(f)
				continue
			}
			t.Errorf("%s: a snapshot of no tool: remove it (or -update)", f)
		}
	}
	if len(seen) == 0 {
		t.Fatal("tools/list listed no tool")
	}
}

// docs/mcp.md's tool table lists every tool tools/list has, and no other.
func TestDocsListEveryTool(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "mcp.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The tools\n")
	if !ok {
		t.Fatal(`docs/mcp.md has no "## The tools" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	var served []string
	for _, tool := range listTools(t) {
		served = append(served, tool.Name)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("docs/mcp.md's tool table lists %q; tools/list has %q", documented, served)
	}
}

// No tool's input schema has a type union with null (["null", "integer"]
// from a pointer field, ["null", "array"] from a slice), which strict
// clients refuse: an optional parameter is one left out.
func TestInputSchemasHaveNoNullTypes(t *testing.T) {
	var walk func(tool, at string, v any)
	walk = func(tool, at string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if ty, ok := x["type"].([]any); ok {
				t.Errorf("%s: %s has the type union %v", tool, at, ty)
			}
			if x["type"] == "null" {
				t.Errorf("%s: %s is of type null", tool, at)
			}
			for k, c := range x {
				walk(tool, at+"."+k, c)
			}
		case []any:
			for _, c := range x {
				walk(tool, at, c)
			}
		}
	}
	for _, tool := range listTools(t) {
		b, _ := json.Marshal(tool.InputSchema)
		var v any
		json.Unmarshal(b, &v)
		walk(tool.Name, "inputSchema", v)
	}
}
