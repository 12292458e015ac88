package ui

import (
	. "github.com/alecthomas/chroma/v2" // nolint: as chroma's own lexers are written
)

// rule is a chroma Rule with fields named (go vet's composites check).
func rule(pattern string, typ Emitter) Rule { return Rule{Pattern: pattern, Type: typ} }

// goLexer is chroma's Go lexer (lexers/go.go of chroma v2, MIT: see
// lexers/LICENSE), which chroma writes in Go rather than XML; raw strings
// are one string token here instead of being lexed as text templates.
func goLexer() Lexer {
	return MustNewLexer(&Config{
		Name:      "Go",
		Aliases:   []string{"go", "golang"},
		Filenames: []string{"*.go"},
		MimeTypes: []string{"text/x-gosrc"},
	}, func() Rules {
		return Rules{
			"root": {
				rule(`\n`, TextWhitespace),
				rule(`\s+`, TextWhitespace),
				rule(`//[^\s\n\r][^\n\r]*`, CommentPreproc),
				rule(`//[^\n\r]*`, CommentSingle),
				rule(`/(\\\n)?[*](.|\n)*?[*](\\\n)?/`, CommentMultiline),
				rule(`(import|package)\b`, KeywordNamespace),
				rule(`(var|func|struct|map|chan|type|interface|const)\b`, KeywordDeclaration),
				rule(Words(``, `\b`, `break`, `default`, `select`, `case`, `defer`, `go`, `else`, `goto`, `switch`, `fallthrough`, `if`, `range`, `continue`, `for`, `return`), Keyword),
				rule(`(true|false|iota|nil)\b`, KeywordConstant),
				rule(Words(``, `\b(\()`, `uint`, `uint8`, `uint16`, `uint32`, `uint64`, `int`, `int8`, `int16`, `int32`, `int64`, `float`, `float32`, `float64`, `complex64`, `complex128`, `byte`, `rune`, `string`, `bool`, `error`, `uintptr`, `print`, `println`, `panic`, `recover`, `close`, `complex`, `real`, `imag`, `len`, `cap`, `append`, `copy`, `delete`, `new`, `make`, `clear`, `min`, `max`), ByGroups(NameBuiltin, Punctuation)),
				rule(Words(``, `\b`, `uint`, `uint8`, `uint16`, `uint32`, `uint64`, `int`, `int8`, `int16`, `int32`, `int64`, `float`, `float32`, `float64`, `complex64`, `complex128`, `byte`, `rune`, `string`, `bool`, `error`, `uintptr`, `any`), KeywordType),
				rule(`\d+i`, LiteralNumber),
				rule(`\d+\.\d*([Ee][-+]\d+)?i`, LiteralNumber),
				rule(`\.\d+([Ee][-+]\d+)?i`, LiteralNumber),
				rule(`\d+[Ee][-+]\d+i`, LiteralNumber),
				rule(`\d+(\.\d+[eE][+\-]?\d+|\.\d*|[eE][+\-]?\d+)`, LiteralNumberFloat),
				rule(`\.\d+([eE][+\-]?\d+)?`, LiteralNumberFloat),
				rule(`0[0-7]+`, LiteralNumberOct),
				rule(`0[xX][0-9a-fA-F_]+`, LiteralNumberHex),
				rule(`0b[01_]+`, LiteralNumberBin),
				rule(`(0|[1-9][0-9_]*)`, LiteralNumberInteger),
				rule(`'(\\['"\\abfnrtv]|\\x[0-9a-fA-F]{2}|\\[0-7]{1,3}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|[^\\])'`, LiteralStringChar),
				rule("`[^`]*`", LiteralString),
				rule(`"(\\\\|\\"|[^"])*"`, LiteralString),
				rule(`(<<=|>>=|<<|>>|<=|>=|&\^=|&\^|\+=|-=|\*=|/=|%=|&=|\|=|&&|\|\||<-|\+\+|--|==|!=|:=|\.\.\.|[+\-*/%&])`, Operator),
				rule(`([a-zA-Z_]\w*)(\s*)(\()`, ByGroups(NameFunction, UsingSelf("root"), Punctuation)),
				rule(`[|^<>=!()\[\]{}.,;:~]`, Punctuation),
				rule(`[^\W\d]\w*`, NameOther),
			},
		}
	})
}
