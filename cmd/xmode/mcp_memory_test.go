package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// peakRSS is process pid's peak resident memory so far (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 { return procValue(t, pid, "status", "VmHWM") }

// writeCall is a tools/call of file_write of size bytes of content, as a
// JSON-RPC request of id.
func writeCall(id int, session, path string, size int) io.Reader {
	return io.MultiReader(
		strings.NewReader(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"file_write","arguments":{"session":%q,"path":%q,"content":"`, id, session, path)),
		io.LimitReader(repeatReader('a'), int64(size)), strings.NewReader(`"}}}`))
}

// memoryCeiling is what the server may reach under ten concurrent 63 MiB
// requests: one at a time, each a few copies of its body (the body, the
// SDK's message, the arguments, the file's bytes), plus the server's own
// (~550 MiB measured). Without the bound, the ten were held at once (2.2
// GB measured).
const memoryCeiling = 900 << 20

// largeRequest is the size of the requests: 63 MiB, as the issue's; 9 MiB
// under the race detector, whose shadow memory and slowness multiply
// both (the ceiling is then not checked, the ratio still is).
func largeRequest() int {
	if raceBuild {
		return 9 << 20 // past file_write's 8 MiB, as 63 MiB is
	}
	return 63 << 20
}

// checkPeaks compares the server's peak memory after one large request
// (one) and after ten at once (ten), from base: ten at once may cost at
// most a few times what one did — they are handled one at a time — and,
// without the race detector, no more than memoryCeiling.
func checkPeaks(t *testing.T, base, one, ten int64, size int) {
	t.Helper()
	t.Logf("the server's peak RSS: %d MiB at the start, %d MiB after one %d MiB request, %d MiB after ten at once", base>>20, one>>20, size>>20, ten>>20)
	if ten-base > 3*(one-base) {
		t.Errorf("ten %d MiB requests at once took the server %d MiB over its start, one alone %d MiB: they are not bounded", size>>20, (ten-base)>>20, (one-base)>>20)
	}
	if !raceBuild && ten > memoryCeiling {
		t.Errorf("the server reached %d MiB for ten %d MiB requests (at most %d MiB)", ten>>20, size>>20, memoryCeiling>>20)
	}
}

// Over HTTP, ten concurrent 63 MiB file_writes (content file_write then
// refuses as over 8 MiB, once decoded) are read and decoded one at a time
// — the bytes of bodies in flight bounded — so the server's peak memory
// stays near one request's, and every one is answered; a body
// over 1 MiB for a tool that takes no file content is refused (413, a
// JSON-RPC error saying the limit) before it is read whole.
func TestMCPHTTPBodyMemory(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	endpoint, token, proc := r.httpServerProc(nil)
	cs := r.httpClient(endpoint, token, nil)
	id := str(ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo}), "session", "id")
	post := func(body io.Reader) (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", endpoint, body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("POST: %v", err)
			return nil, nil
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	n, size := 10, largeRequest()
	write := func(i int) {
		res, b := post(writeCall(100+i, id, fmt.Sprintf("big/%d", i), size))
		// Decoded whole, and refused by file_write's own limit.
		if res == nil || res.StatusCode != http.StatusOK || !strings.Contains(string(b), "a write holds at most 8388608") {
			t.Errorf("write %d: %v %.300s", i, res, b)
		}
	}
	base := peakRSS(t, proc.Pid)
	write(0)
	one := peakRSS(t, proc.Pid)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { write(1 + i) })
	}
	wg.Wait()
	checkPeaks(t, base, one, peakRSS(t, proc.Pid), size)

	// A large body for a tool that takes no file content: 413, said.
	big := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"session":"`+id+`","command":"echo `),
		io.LimitReader(repeatReader('a'), 4<<20), strings.NewReader(`"}}}`))
	res, b := post(big)
	var e rpcErrorReply
	json.Unmarshal(b, &e)
	if res == nil || res.StatusCode != http.StatusRequestEntityTooLarge || e.ID != 7 || !strings.Contains(e.Error.Message, "longer than 1 MiB, the most for a tools/call of sandbox_exec") {
		t.Fatalf("a 4 MiB sandbox_exec: %v %.300s", res, b)
	}
	ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "true"})
}

// rpcErrorReply is a JSON-RPC error response.
type rpcErrorReply struct {
	ID    int `json:"id"`
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Over stdio the same bound: ten 63 MiB file_write lines sent at once are
// read as the budget frees (the client's writes wait), every one answered,
// and the server's peak memory stays near one request's; a line over
// 1 MiB for another tool gets a JSON-RPC error saying the limit.
func TestMCPStdioLineMemory(t *testing.T) {
	t.Parallel()
	r := newMCPRig(t)
	c, in, out := r.rawStdio()
	replies := make(chan map[string]any, 32)
	go func() {
		for {
			l, err := out.ReadString('\n')
			if err != nil {
				close(replies)
				return
			}
			var m map[string]any
			json.Unmarshal([]byte(l), &m)
			replies <- m
		}
	}()
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`+"\n")
	<-replies
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_create","arguments":{}}}`+"\n")
	id := str(<-replies, "result", "structuredContent", "session", "id")
	if id == "" {
		t.Fatal("sandbox_create failed")
	}
	n, size := 10, largeRequest()
	send := func(from, to int) {
		for i := from; i < to; i++ {
			io.Copy(in, writeCall(100+i, id, fmt.Sprintf("big/%d", i), size))
			io.WriteString(in, "\n")
		}
	}
	answered := func(m map[string]any) {
		t.Helper()
		switch {
		case m["id"] == float64(7):
			if msg := str(m, "error", "message"); !strings.Contains(msg, "longer than 1 MiB, the most for a tools/call of sandbox_list") {
				t.Errorf("a 2 MiB sandbox_list: %v", m)
			}
		case !strings.Contains(str(m, "result", "content"), "a write holds at most 8388608"):
			t.Errorf("a write: %.300v", m)
		}
	}
	base := peakRSS(t, c.Process.Pid)
	send(0, 1)
	answered(<-replies)
	one := peakRSS(t, c.Process.Pid)
	go func() {
		send(1, 1+n)
		io.WriteString(in, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sandbox_list","arguments":{"x":"`+strings.Repeat("a", 2<<20)+`"}}}`+"\n")
	}()
	for range n + 1 {
		answered(<-replies)
	}
	checkPeaks(t, base, one, peakRSS(t, c.Process.Pid), size)
}
