package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
)

// versionInfo is what `meshagent version` prints (--json: as is).
type versionInfo struct {
	// Version is the module version, "(devel)" for a build from a
	// checkout.
	Version string `json:"version"`
	// Commit, CommitTime and Modified describe the checkout a binary was
	// built from (go build records them); empty when unknown.
	Commit     string `json:"commit"`
	CommitTime string `json:"commitTime"`
	Modified   bool   `json:"modified"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
	// Protocols are the wire protocol ids this build speaks.
	Protocols versionProtocols `json:"protocols"`
}

type versionProtocols struct {
	Envelope string `json:"envelope"`
	Hello    string `json:"hello"`
	Request  string `json:"request"`
}

// buildVersion reads the binary's build information.
func buildVersion() versionInfo {
	v := versionInfo{
		Version:   "(devel)",
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		Protocols: versionProtocols{
			Envelope: protocol.Version,
			Hello:    string(protocol.HelloProtocol),
			Request:  string(protocol.RequestProtocol),
		},
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// version is the module version the binary was built from.
func version() string { return buildVersion().Version }

func (r *runState) versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the version, commit, Go version and protocol ids of this binary",
		Description: "Prints the module version (\"(devel)\" for a build from a checkout), the commit it " +
			"was built from (marked modified when the checkout had changes), the Go version and platform, " +
			"and the wire protocols it speaks. --json prints {\"version\",\"commit\",\"commitTime\"," +
			"\"modified\",\"goVersion\",\"platform\",\"protocols\":{\"envelope\",\"hello\",\"request\"}}.",
		Flags:  []ucli.Flag{jsonFlag("print the version information as one JSON object")},
		Action: r.runVersion,
	}
}

func (r *runState) runVersion(c *ucli.Context) error {
	if err := r.noArgs(c); err != nil {
		return err
	}
	v := buildVersion()
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, v)
	}
	commit := orDash(v.Commit)
	if v.Modified {
		commit += " (modified)"
	}
	if v.CommitTime != "" {
		commit += " " + v.CommitTime
	}
	_, err := fmt.Fprintf(r.stdout, "meshagent %s\ncommit:    %s\ngo:        %s %s\nprotocols: %s %s %s\n",
		v.Version, commit, v.GoVersion, v.Platform, v.Protocols.Envelope, v.Protocols.Hello, v.Protocols.Request)
	return err
}
