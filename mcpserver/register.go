package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xmode/xmode/fail"
)

// The tools, by toolset: the sandbox's life (sessions.go), its steps
// (steps.go), its files (files.go), its change (changes.go) and its
// network (network.go); each
// tool's definition — name, description, annotations; its schemas come
// from its input and output types — sits beside its handler. Each handler
// resolves the session in the server's scope and calls the service the CLI
// calls. Never a review tool: an agent does not approve its own change
// request. testdata/toolsnaps holds what a client is told of each tool.
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

// addTools registers every tool, toolset by toolset.
func (s *Server) addTools() {
	for _, add := range []func(){
		s.addSandboxCreate, s.addSandboxList, s.addSandboxShow, s.addSandboxStop, s.addSandboxExtend, s.addSandboxFork,
		s.addSandboxExec, s.addStepStatus, s.addStepLogs, s.addStepKill,
		s.addFileRead, s.addFileList, s.addFileWrite, s.addFileEdit, s.addFileDelete,
		s.addSandboxDiff, s.addCRCreate, s.addCRShow,
		s.addNetworkPolicy, s.addNetworkLog, s.addSandboxPort,
	} {
		add()
	}
}

// add registers a tool whose handler returns its output or an error that
// toolError turns into the model's message, and logs the call.
func add[In, Out any](s *Server, t *mcp.Tool, h func(context.Context, *mcp.CallToolRequest, In) (*mcp.CallToolResult, Out, error)) {
	t.InputSchema = inputSchema[In](t.Name)
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
	in := inputSchema[In](t.Name)
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

// inputSchema is the schema of a tool's input type, each optional field
// a plain type: jsonschema infers ["null", T] from a pointer field, which
// strict clients refuse in an input (an omitted field is the optional
// one; null is not needed).
func inputSchema[In any](tool string) *jsonschema.Schema {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", tool, err))
	}
	noNull(in)
	return in
}

// noNull makes every ["null", T] type of sc and its subschemas T.
func noNull(sc *jsonschema.Schema) {
	if sc == nil {
		return
	}
	if len(sc.Types) == 2 && (sc.Types[0] == "null" || sc.Types[1] == "null") {
		sc.Type = sc.Types[0]
		if sc.Type == "null" {
			sc.Type = sc.Types[1]
		}
		sc.Types = nil
	}
	for _, p := range sc.Properties {
		noNull(p)
	}
	noNull(sc.Items)
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
