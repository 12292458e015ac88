package fail

import (
	"fmt"
	"strings"
)

// Input names something a user gave a service, by a name no front end
// owns: the CLI calls it a flag (--repo), MCP a parameter (repository),
// the UI a form's field. A service names the input its message is about
// by passing it as an argument, and each front end fills in its own word:
//
//	fail.Usagef("%s %q is not a git repository", fail.Repo, path)
//
// reads `--repo "x" is not a git repository` from Error() (the CLI's
// words, which logs and evidence keep) and `repository "x" is not a git
// repository` from MCP's Words.Render. Print an Input with %s or %v.
type Input string

// The inputs services name. Each is the CLI's flag without its dashes.
const (
	Agent       Input = "agent"
	Allow       Input = "allow"
	Attempts    Input = "attempts"
	Branch      Input = "branch"
	CloseOthers Input = "close-others"
	Comment     Input = "comment"
	Credential  Input = "credential"
	Deny        Input = "deny"
	Env         Input = "env"
	EnvPass     Input = "env-pass"
	// ExposeRemote lets a published port listen where other machines reach it.
	ExposeRemote Input = "expose-remote"
	Force        Input = "force"
	From         Input = "from"
	// FromSnapshot is the snapshot a new sandbox starts from.
	FromSnapshot Input = "from-snapshot"
	HostPort     Input = "host-port"
	Image        Input = "image"
	Iterate      Input = "iterate"
	Mode         Input = "mode"
	Model        Input = "model"
	// Name is what a user calls something they make (a snapshot).
	Name       Input = "name"
	Network    Input = "network"
	Note       Input = "note"
	Objective  Input = "objective"
	Parallel   Input = "parallel"
	Project    Input = "project"
	Prompt     Input = "prompt"
	PromptFile Input = "prompt-file"
	Ref        Input = "ref"
	Refresh    Input = "refresh"
	Remove     Input = "remove"
	Repo       Input = "repo"
	Reviewer   Input = "reviewer"
	RunID      Input = "run"
	Signal     Input = "signal"
	// StorageRoot is a setting (XMODE_STORAGE_ROOT) rather than a request's.
	StorageRoot Input = "storage-root"
	TTL         Input = "ttl"
	Timeout     Input = "timeout"
	To          Input = "to"
	Workdir     Input = "workdir"
)

// Inputs lists every input a service may name, for a front end's test
// that it has a word for each.
func Inputs() []Input {
	return []Input{Agent, Allow, Attempts, Branch, CloseOthers, Comment, Credential, Deny, Env, EnvPass, ExposeRemote, Force, From, FromSnapshot,
		HostPort, Image, Iterate, Mode, Model, Name, Network, Note, Objective, Parallel, Project, Prompt, PromptFile, Ref, Refresh, Remove, Repo,
		Reviewer, RunID, Signal, StorageRoot, TTL, Timeout, To, Workdir}
}

// Flag is the CLI's word for in.
func (in Input) Flag() string { return "--" + string(in) }

// String is the CLI's word, so that Error() reads as the CLI prints it.
func (in Input) String() string { return in.Flag() }

// A Part is a piece of an error's message: text, the input it names
// (Input set), or an action it tells the user to take (Action set); Text
// is the CLI's words for it.
type Part struct {
	Text   string  `json:"text"`
	Input  Input   `json:"input,omitempty"`
	Action *Action `json:"action,omitempty"`
}

// text reports whether p is plain text.
func (p Part) text() bool { return p.Input == "" && p.Action == nil }

// Parts cuts err's whole message (what Error() says, wrapping included)
// at the inputs and actions its errors name, for a front end that shows
// them as more than the CLI's words (the UI: a link to the form's field).
func Parts(err error) []Part {
	if err == nil {
		return nil
	}
	parts := []Part{{Text: err.Error()}}
	for _, e := range named(err) {
		own := e.parts()
		whole := e.Error()
		for i, p := range parts {
			if !p.text() {
				continue
			}
			before, after, ok := strings.Cut(p.Text, whole)
			if !ok {
				continue
			}
			cut := append([]Part{{Text: before}}, own...)
			cut = append(cut, Part{Text: after})
			parts = append(parts[:i], append(cut, parts[i+1:]...)...)
			break
		}
	}
	return join(parts)
}

// Words are a front end's words for what a service's error names: an
// input (nil: the CLI's flag) and an action (nil: the CLI's command line).
type Words struct {
	Input  func(Input) string
	Action func(Action) string
}

// Render is err's message in w.
func (w Words) Render(err error) string {
	var b strings.Builder
	for _, p := range Parts(err) {
		switch {
		case p.Input != "" && w.Input != nil:
			b.WriteString(w.Input(p.Input))
		case p.Action != nil && w.Action != nil:
			b.WriteString(w.Action(*p.Action))
		default:
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// InputOf is the input err is about: the first its message names ("" for
// none), for a front end that marks it (the UI's field in error).
func InputOf(err error) Input {
	for _, p := range Parts(err) {
		if p.Input != "" {
			return p.Input
		}
	}
	return ""
}

// FromParts is an error of kind k whose message is parts, as Parts cut it:
// an error that crossed from one process to another as its parts keeps
// the inputs and actions it names.
func FromParts(k Kind, parts []Part) error {
	var format strings.Builder
	var args []any
	for _, p := range parts {
		switch {
		case p.Input != "":
			format.WriteString("%s")
			args = append(args, p.Input)
			continue
		case p.Action != nil:
			format.WriteString("%s")
			args = append(args, *p.Action)
			continue
		}
		format.WriteString(strings.ReplaceAll(p.Text, "%", "%%"))
	}
	return newf(k, format.String(), args...)
}

// named is every *Error in err's tree whose arguments name an input or
// an action, outermost first.
func named(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if e, ok := err.(*Error); ok {
			for _, a := range e.args {
				if cutAt(a) {
					out = append(out, e)
					break
				}
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		}
	}
	walk(err)
	return out
}

// parts is e's own message cut at its Input arguments: the format is
// printed a piece at a time, each piece with the arguments its verbs
// take. A format it cannot follow (explicit argument indexes) is one
// piece of text.
func (e *Error) parts() []Part {
	whole := []Part{{Text: e.Error()}}
	var parts []Part
	start, argStart, arg := 0, 0, 0
	f := e.format
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		verb := i
		i++
		for i < len(f) && strings.IndexByte("+-# 0", f[i]) >= 0 {
			i++
		}
		for i < len(f) && (f[i] >= '0' && f[i] <= '9' || f[i] == '.' || f[i] == '*') {
			if f[i] == '*' {
				arg++
			}
			i++
		}
		if i >= len(f) || f[i] == '[' {
			return whole
		}
		if f[i] == '%' {
			continue
		}
		if arg < len(e.args) && cutAt(e.args[arg]) {
			part := Part{Text: fmt.Sprint(e.args[arg])}
			switch a := e.args[arg].(type) {
			case Input:
				part.Input = a
			case Action:
				part.Action = &a
			}
			parts = append(parts, Part{Text: errorf(f[start:verb], e.args[argStart:arg])}, part)
			start, argStart = i+1, arg+1
		}
		arg++
	}
	if arg != len(e.args) {
		return whole // a miscounted format: fmt said so in the text
	}
	parts = append(parts, Part{Text: errorf(f[start:], e.args[argStart:])})
	if len(parts) == 1 {
		return whole
	}
	return parts
}

// errorf formats as fmt.Errorf does, so that %w prints its error.
func errorf(format string, args []any) string {
	if len(args) == 0 && !strings.Contains(format, "%") {
		return format
	}
	return fmt.Errorf(format, args...).Error()
}

// cutAt reports whether a format argument is a part of its own: an input
// or an action.
func cutAt(arg any) bool {
	switch arg.(type) {
	case Input, Action:
		return true
	}
	return false
}

// join drops empty text and merges neighbouring text.
func join(parts []Part) []Part {
	out := parts[:0:0]
	for _, p := range parts {
		switch {
		case p.text() && p.Text == "":
		case p.text() && len(out) > 0 && out[len(out)-1].text():
			out[len(out)-1].Text += p.Text
		default:
			out = append(out, p)
		}
	}
	return out
}
