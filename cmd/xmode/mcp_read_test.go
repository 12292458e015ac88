package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// procValue is the number after "key:" in /proc/PID/file (rchar in io,
// VmHWM in status, whose kB it turns into bytes).
func procValue(t *testing.T, pid int, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			v, kb := strings.CutSuffix(strings.TrimSpace(v), " kB")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/%s: %s: %v", pid, file, l, err)
			}
			if kb {
				n <<= 10
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/%s", key, pid, file)
	return 0
}

// procRead is how many bytes process pid has read (rchar).
func procRead(t *testing.T, pid int) int64 { return procValue(t, pid, "io", "rchar") }

// file_read of a 100 GB sparse file (a real one, on the real filesystem)
// costs the server what it returns plus a bounded scan — counted in the
// bytes the server process reads — and says the file is binary (its NULs
// are not text) with its line count unknown (null); text holding a NUL is
// binary too; line_numbers numbers lines as cat -n; a cancelled read
// leaves the server serving.
func TestMCPFileReadHugeSparse(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	cs, proc := r.stdioServer(nil, nil)
	created := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
	id, wt := str(created, "session", "id"), str(created, "session", "worktree")
	huge := filepath.Join(wt, "huge.log")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 100<<30); err != nil {
		t.Fatal(err)
	}

	before := procRead(t, proc.Pid)
	res, out := call(t, cs, "file_read", map[string]any{"session": id, "path": "huge.log"})
	read := procRead(t, proc.Pid) - before
	if read > 64<<20 {
		t.Fatalf("file_read of a 100 GB file read %d bytes on the server; a read scans at most 32 MiB", read)
	}
	if res.IsError || str(out, "binary") != "true" || str(out, "content") != "" || out["total_lines"] != nil ||
		str(out, "file", "bytes") != strconv.FormatInt(100<<30, 10) || !strings.Contains(text(res), "is not text") {
		t.Fatalf("file_read of a 100 GB sparse file: isError %v, %v, %.300s", res.IsError, out, text(res))
	}
	if _, ok := out["total_lines"]; !ok {
		t.Fatalf("total_lines is left out; want null: %v", out)
	}
	toolErr(t, cs, "file_read", map[string]any{"session": id, "path": "huge.log", "start_line": 3}, "refused: line 3 of huge.log is past the first 32 MiB")

	// A NUL in text: binary, not returned.
	ok(t, cs, "file_write", map[string]any{"session": id, "path": "nul.txt", "content": "one\ntw\x00o\n"})
	if rd := ok(t, cs, "file_read", map[string]any{"session": id, "path": "nul.txt"}); str(rd, "binary") != "true" || str(rd, "content") != "" || str(rd, "total_lines") != "2" {
		t.Fatalf("text with a NUL: %v", rd)
	}
	// Line numbers, as cat -n.
	ok(t, cs, "file_write", map[string]any{"session": id, "path": "three.txt", "content": "a\nb\nc\n"})
	if rd := ok(t, cs, "file_read", map[string]any{"session": id, "path": "three.txt", "start_line": 2, "line_numbers": true}); str(rd, "content") != "     2\tb\n     3\tc\n" {
		t.Fatalf("line_numbers: %q", str(rd, "content"))
	}

	// A call cancelled while it reads ends at the client, and the server
	// serves on.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "file_read", Arguments: map[string]any{"session": id, "path": "huge.log"}}); err == nil {
		t.Log("the read ended before its cancel")
	}
	ok(t, cs, "sandbox_list", nil)
}
