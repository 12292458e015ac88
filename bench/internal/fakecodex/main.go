// Command fakecodex is the Codex CLI stand-in (codexcloudtest.Main) built as
// a binary of its own, as the real codex is one: the cloud benchmarks time a
// poll pass against it.
package main

import (
	"os"

	"github.com/xmode/xmode/codexcloud/codexcloudtest"
)

func main() { os.Exit(codexcloudtest.Main()) }
