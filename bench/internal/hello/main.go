// Command hello is the smallest Go program, built as xmode is built: what
// any Go binary pays to start on the machine at hand (runtime set-up, its
// threads, the page faults of a fresh process). `make bench` reports it
// beside xmode's start-up, so xmode's figures can be read against it.
package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
