package fail

import "strings"

// An Action is a command a message tells the user to run next, named by
// what it does rather than in one front end's syntax: the CLI writes it as
// its command line (`xmode sandbox extend sbx_1 --ttl 1h`), MCP as the tool
// that does it with its parameters (sandbox_extend with session "sbx_1"
// and ttl "1h"). A service passes one as an argument, as it passes an
// Input:
//
//	fail.Refusedf("session %s expired: extend it with %s", id, fail.Do("sandbox extend", id).With(fail.TTL, "1h"))
//
// Print an Action with %s or %v.
type Action struct {
	// Command is the CLI's command, without "xmode": "sandbox extend".
	Command string `json:"command"`
	// Args are what follows it, in the CLI's order.
	Args []Arg `json:"args,omitempty"`
}

// An Arg is one word of an Action after its command: an operand (no
// Input: a session's ID), a placeholder the user fills in (Placeholder:
// Value names it, as ID), or an input with its value ("" for a switch:
// --force).
type Arg struct {
	Input       Input  `json:"input,omitempty"`
	Value       string `json:"value,omitempty"`
	Placeholder bool   `json:"placeholder,omitempty"`
}

// Do is the action of running command (the CLI's, without "xmode") on
// operands.
func Do(command string, operands ...string) Action {
	a := Action{Command: command}
	for _, o := range operands {
		a.Args = append(a.Args, Arg{Value: o})
	}
	return a
}

// Arg is a with one more operand.
func (a Action) Arg(operand string) Action { return a.add(Arg{Value: operand}) }

// Some is a with a placeholder the user fills in, named name (ID, NAME).
func (a Action) Some(name string) Action { return a.add(Arg{Value: name, Placeholder: true}) }

// With is a with an input and its value; "" for a switch (--force).
func (a Action) With(in Input, value string) Action { return a.add(Arg{Input: in, Value: value}) }

func (a Action) add(arg Arg) Action {
	a.Args = append(a.Args[:len(a.Args):len(a.Args)], arg) // never a shared array
	return a
}

// String is the CLI's command line, in backticks.
func (a Action) String() string {
	var b strings.Builder
	b.WriteString("`xmode " + a.Command)
	for _, arg := range a.Args {
		b.WriteByte(' ')
		switch {
		case arg.Input == "":
			b.WriteString(ShellWord(arg.Value))
		case arg.Value == "":
			b.WriteString(arg.Input.Flag())
		default:
			b.WriteString(arg.Input.Flag() + " " + ShellWord(arg.Value))
		}
	}
	b.WriteByte('`')
	return b.String()
}

// ShellWord is v as a word of a command line a user pastes into a shell:
// as it is when it is made of plain characters, else in single quotes.
func ShellWord(v string) string {
	if v != "" && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}
