package main

import (
	"os"

	"github.com/meshagent/meshagent/cli"
)

func main() { os.Exit(cli.Main(os.Args)) }
