package mcpserver

import (
	"strings"
	"testing"
)

// Which messages may be large: a tools/call of file_write or file_edit,
// read from the message's start — its method and params.name, whatever
// the order of the other members, and before arguments.
func TestMessageKind(t *testing.T) {
	for head, want := range map[string][2]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_write","arguments":{"content":"aaa`: {"tools/call", "file_write"},
		`{"params":{"_meta":{"progressToken":1},"name":"file_edit","arguments":{"old_string":"`:                   {"", "file_edit"},
		`{"id":"x","params":{"name":"sandbox_exec"},"method":"tools/call"}`:                                       {"tools/call", "sandbox_exec"},
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`:                                                          {"tools/list", ""},
		`{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"content":"a"},"name":"file_write"}}`:      {"tools/call", ""},
		`["not an object"]`: {"", ""},
		`{"method":`:        {"", ""},
	} {
		m, tool := messageKind([]byte(head))
		if m != want[0] || tool != want[1] {
			t.Errorf("%s: %q %q, want %q", head, m, tool, want)
		}
	}
	if !takesContent([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_edit","arguments":{`)) ||
		!takesContent([]byte(`{"params":{"name":"file_write","arguments":{`)) ||
		takesContent([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{`)) {
		t.Error("takesContent")
	}
	msg := tooLargeMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{`), SmallMessageBytes)
	if !strings.Contains(msg, "longer than 1 MiB, the most for a tools/call of sandbox_exec: only file_write and file_edit take more") {
		t.Errorf("too large: %s", msg)
	}
}
