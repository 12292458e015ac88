package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP server (`xmode mcp`, docs/mcp.md) under the Go SDK's client over
// stdio, as an agent's client drives it.

// mcpServer starts the built xmode as `xmode mcp` with env and connects a
// client; it returns the session and the server's process.
func mcpServer(b *testing.B, env []string) (*mcp.ClientSession, *os.Process) {
	b.Helper()
	c := exec.Command(xmodeBin(b), "mcp")
	c.Env = append(os.Environ(), env...)
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		b.Fatalf("connect to xmode mcp: %v", err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs, c.Process
}

// callOK calls a tool that must succeed and returns its structured output.
func callOK(b *testing.B, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	b.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		b.Fatalf("%s: %v %+v", name, err, res)
	}
	out, _ := res.StructuredContent.(map[string]any)
	return out
}

// mcpSession makes a repository and a session of it through cs.
func mcpSession(b *testing.B, cs *mcp.ClientSession, repo string) string {
	b.Helper()
	out := callOK(b, cs, "sandbox_create", map[string]any{"repository": repo})
	s, _ := out["session"].(map[string]any)
	id, _ := s["id"].(string)
	if id == "" {
		b.Fatalf("sandbox_create: %v", out)
	}
	return id
}

// BenchmarkMCPExec: sandbox_exec of `true` through a running `xmode mcp`
// over stdio, against `xmode sandbox exec ID -- true` as a process, side by
// side. Target: at most 0.5 of the process (the server keeps the store
// open and pays no start-up).
func BenchmarkMCPExec(b *testing.B) {
	dir := b.TempDir()
	makeRepo(b, filepath.Join(dir, "repo"), 20, 2)
	env := []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_MCP_REPOS=" + dir}
	cs, proc := mcpServer(b, env)
	id := mcpSession(b, cs, filepath.Join(dir, "repo"))
	bin := xmodeBin(b)
	b.ResetTimer()
	cpu0 := procCPU(b, proc.Pid)
	med := sideBySide(rounds(b),
		func() { callOK(b, cs, "sandbox_exec", map[string]any{"session": id, "argv": []string{"true"}}) },
		func() { run(b, env, bin, "sandbox", "exec", id, "--", "true") },
	)
	b.ReportMetric(ms(procCPU(b, proc.Pid)-cpu0)/float64(rounds(b)), "server-cpu-ms/exec")
	b.ReportMetric(ms(med[0]), "mcp-exec-ms")
	b.ReportMetric(ms(med[1]), "cli-exec-ms")
	b.ReportMetric(float64(med[0])/float64(med[1]), "mcp/cli")
}

// BenchmarkMCPFiles: file_write and file_read of a 100 KB file over stdio,
// each a recorded step. Target: at most 5 ms each.
func BenchmarkMCPFiles(b *testing.B) {
	dir := b.TempDir()
	makeRepo(b, filepath.Join(dir, "repo"), 20, 2)
	cs, proc := mcpServer(b, []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_MCP_REPOS=" + dir})
	id := mcpSession(b, cs, filepath.Join(dir, "repo"))
	content := strings.Repeat(strings.Repeat("x", 99)+"\n", 1000) // 100 KB, 1000 lines
	b.ResetTimer()
	cpu0 := procCPU(b, proc.Pid)
	med := sideBySide(rounds(b),
		func() {
			callOK(b, cs, "file_write", map[string]any{"session": id, "path": "data/f.txt", "content": content})
		},
		func() {
			if out := callOK(b, cs, "file_read", map[string]any{"session": id, "path": "data/f.txt"}); len(out["content"].(string)) != len(content) {
				b.Fatalf("file_read read %d bytes", len(out["content"].(string)))
			}
		},
	)
	b.ReportMetric(ms(procCPU(b, proc.Pid)-cpu0)/float64(rounds(b)), "server-cpu-ms/write+read")
	b.ReportMetric(ms(med[0]), "write-100KB-ms")
	b.ReportMetric(ms(med[1]), "read-100KB-ms")
}

// BenchmarkMCPIdleRSS: the resident memory of a server that made 50
// sessions and now waits for its client. Target: under 40 MB.
func BenchmarkMCPIdleRSS(b *testing.B) {
	dir := b.TempDir()
	makeRepo(b, filepath.Join(dir, "repo"), 20, 2)
	cs, proc := mcpServer(b, []string{"XMODE_STORAGE_ROOT=" + filepath.Join(dir, "root"), "XMODE_SANDBOX_MAX_OPEN=0", "XMODE_MCP_REPOS=" + dir})
	for range 50 {
		mcpSession(b, cs, filepath.Join(dir, "repo"))
	}
	callOK(b, cs, "sandbox_list", nil)
	b.ResetTimer()
	var rss, hwm float64
	for range rounds(b) {
		// Idle: nothing in flight; read what it holds now.
		rss, hwm = procStatusMB(b, proc.Pid, "VmRSS:"), procStatusMB(b, proc.Pid, "VmHWM:")
	}
	b.ReportMetric(rss, "idle-rss-MB")
	b.ReportMetric(hwm, "peak-rss-MB")
}

// procStatusMB is a /proc/PID/status memory field in MB.
func procStatusMB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// procCPU is the CPU time (user + system) process pid has used so far.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// After the command's name in parentheses: state is field 3, utime
	// and stime fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}
