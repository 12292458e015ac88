// Command gen writes xmode's CLI reference or man pages:
//
//	go run ./internal/clidocs/gen -markdown docs/cli
//	go run ./internal/clidocs/gen -man DIR
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xmode/xmode/internal/clidocs"
)

func main() {
	md := flag.String("markdown", "", "write the Markdown reference into this directory")
	man := flag.String("man", "", "write man pages into this directory")
	flag.Parse()
	if *md == "" && *man == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -markdown DIR | -man DIR")
		os.Exit(2)
	}
	for _, job := range []struct {
		dir string
		gen func(string) error
	}{{*md, clidocs.Markdown}, {*man, clidocs.Man}} {
		if job.dir == "" {
			continue
		}
		if err := job.gen(job.dir); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
