package mcpserver

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A successful response goes out as the line EncodeMessage makes of it,
// byte for byte; anything else (an error, a request, a result holding a
// newline) is left to EncodeMessage.
func TestResponseLineIsEncodeMessages(t *testing.T) {
	intID, _ := jsonrpc.MakeID(float64(7))
	strID, _ := jsonrpc.MakeID(`a"<b>`)
	result := json.RawMessage(`{"content":[{"type":"text","text":"x\n<y> é"}],"structuredContent":{"content":"x\n<y> é","n":1}}`)
	for _, id := range []jsonrpc.ID{intID, strID} {
		r := &jsonrpc.Response{ID: id, Result: result}
		want, err := jsonrpc.EncodeMessage(r)
		if err != nil {
			t.Fatal(err)
		}
		got := responseLine(r)
		if string(got) != string(want)+"\n" {
			t.Fatalf("id %v:\n got %s\nwant %s", id.Raw(), got, want)
		}
		if m, err := jsonrpc.DecodeMessage(got[:len(got)-1]); err != nil || string(m.(*jsonrpc.Response).Result) != string(result) {
			t.Fatalf("id %v: decoded %+v %v", id.Raw(), m, err)
		}
	}
	req := &jsonrpc.Request{ID: intID, Method: "tools/call", Params: json.RawMessage(`{"a":1}`)}
	for name, m := range map[string]jsonrpc.Message{
		"error":         &jsonrpc.Response{ID: intID, Error: errors.New("no")},
		"request":       req,
		"no id":         &jsonrpc.Response{Result: result},
		"no result":     &jsonrpc.Response{ID: intID},
		"newline in it": &jsonrpc.Response{ID: intID, Result: json.RawMessage("{\n}")},
	} {
		if got := responseLine(m); got != nil {
			t.Errorf("%s: %s", name, got)
		}
	}
}
