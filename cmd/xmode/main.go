// Command xmode is the sandbox runner. Everything lives in package cmd.
package main

import (
	"os"

	"github.com/xmode/xmode/cmd"
)

func main() { os.Exit(cmd.Main()) }
