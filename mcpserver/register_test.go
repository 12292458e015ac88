package mcpserver

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/xmode/xmode/fail"
)

// A tool's arguments decode in one pass as the schema has them: every
// required field, no unknown one, each of its type (the field named), and
// nothing after the object.
func TestDecodeArgs(t *testing.T) {
	fields, required := fieldsOf[editIn](), []string{"session", "path", "old_string", "new_string"}
	v, err := decodeArgs[editIn](json.RawMessage(`{"session":"s","path":"p","old_string":"a\nb","NEW_string":"c","replace_all":true}`), fields, required)
	if err == nil {
		t.Fatalf("NEW_string given, new_string missing: %+v", v)
	}
	v, err = decodeArgs[editIn](json.RawMessage(` {"session":"s","path":"p","old_string":"a\nb","new_string":"c\u00e9","replace_all":true} `), fields, required)
	if err != nil || v != (editIn{Session: "s", Path: "p", OldString: "a\nb", NewString: "cé", ReplaceAll: true}) {
		t.Fatalf("%+v %v", v, err)
	}
	for args, want := range map[string]string{
		`{"session":"s","path":"p","old_string":"a"}`:                                      `"new_string" is required`,
		`{"session":"s","path":"p","old_string":"a","new_string":"b","x":1}`:               `the arguments: json: unknown field "x"`,
		`{"session":"s","path":"p","old_string":"a","new_string":"b","replace_all":"yes"}`: "the arguments: json: cannot unmarshal string into Go struct field editIn.replace_all of type bool",
		`{"session":"s","path":"p","old_string":"a","new_string":"b"} {}`:                  "more than one JSON value",
		`["session"]`:     "not a JSON object",
		`{"session":"s",`: "the arguments:",
		``:                `"session" is required`,
	} {
		_, err := decodeArgs[editIn](json.RawMessage(args), fields, required)
		if err == nil || fail.KindOf(err) != fail.Usage || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// file_read's line_numbers are cat -n's, as the real cat prints them.
func TestNumberLinesIsCatN(t *testing.T) {
	for _, content := range []string{"", "one\n", "one\ntwo", "a\n\n\tb\n", strings.Repeat("x\n", 1000001)} {
		c := exec.Command("cat", "-n")
		c.Stdin = strings.NewReader(content)
		want, err := c.Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := numberLines(content, 1); got != string(want) {
			t.Errorf("%.40q: got %.80q, cat -n %.80q", content, got, want)
		}
	}
	if got := numberLines("x\ny\n", 41); got != "    41\tx\n    42\ty\n" {
		t.Errorf("from line 41: %q", got)
	}
}
