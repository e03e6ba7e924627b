package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"
)

// Where a setting's value came from, as `config show` reports it.
const (
	sourceFlag    = "flag"
	sourceEnv     = "env"
	sourceFile    = "file"
	sourceDefault = "default"
)

// configSetting is one line of `config show`.
type configSetting struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"` // flag, env, file or default
	// Origin names the flag, variable or file the value came from.
	Origin string `json:"origin,omitempty"`
}

// configShown is `config show --json`.
type configShown struct {
	// ConfigFile is the config file read, "" when there is none.
	ConfigFile string          `json:"configFile"`
	Settings   []configSetting `json:"settings"`
}

func (r *runState) configCommand() *ucli.Command {
	nc := r.nodeCommand()
	var flags []ucli.Flag
	for _, f := range nc.Flags {
		if f.Names()[0] != flagJSON {
			flags = append(flags, f)
		}
	}
	flags = append(flags, jsonFlag(`print {"configFile","settings":[{"key","value","source","origin"}]} as one JSON object`))
	return &ucli.Command{
		Name:      "config",
		Usage:     "show the effective configuration of `meshagent node` and where each value came from",
		ArgsUsage: "show",
		Description: "`meshagent config show` resolves every setting of `meshagent node` exactly as the node " +
			"would (flags beat MESHAGENT_* variables, which beat the config file, which beats defaults) and " +
			"prints each with its source: flag, env (naming the variable), file (naming the file) or " +
			"default. It accepts the node's flags, so `meshagent config show --api 127.0.0.1:7893` shows " +
			"what that command line would run with. It reads but does not create anything.",
		Flags:  flags,
		Action: r.runConfigShow,
	}
}

func (r *runState) runConfigShow(c *ucli.Context) error {
	if len(r.positional) != 1 || r.positional[0] != "show" {
		return usageErrorf("config takes one subcommand: show (`meshagent config show`)")
	}
	shown := configShown{Settings: []configSetting{}}
	if path, ok := r.configFileRead(c); ok {
		shown.ConfigFile = path
	}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if name == flagJSON || name == flagConfig || name == "help" {
			continue
		}
		s := configSetting{Key: name}
		s.Source, s.Origin = r.sourceOf(c, name)
		var err error
		switch f.(type) {
		case *ucli.StringSliceFlag:
			v := c.StringSlice(name)
			if v == nil {
				v = []string{}
			}
			s.Value = v
		case *ucli.BoolFlag:
			s.Value = c.Bool(name)
		case *ucli.DurationFlag:
			s.Value = c.Duration(name).String()
		default:
			s.Value = c.String(name)
		}
		switch name {
		case flagData:
			s.Value, err = r.dataDir(c)
		case flagKey:
			s.Value, err = r.keyPath(c)
		case flagListen:
			if len(c.StringSlice(name)) == 0 {
				s.Value = defaultListenAddrs()
			}
		}
		if err != nil {
			return err
		}
		shown.Settings = append(shown.Settings, s)
	}
	if c.Bool(flagJSON) {
		return writeJSONLine(r.stdout, shown)
	}
	if shown.ConfigFile != "" {
		fmt.Fprintf(r.stdout, "config file: %s\n\n", shown.ConfigFile)
	} else {
		fmt.Fprint(r.stdout, "config file: none\n\n")
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range shown.Settings {
		v := fmt.Sprint(s.Value)
		if list, ok := s.Value.([]string); ok {
			v = orDash(strings.Join(list, ","))
		}
		src := s.Source
		if s.Origin != "" {
			src += " " + s.Origin
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, orQuotedEmpty(v), src)
	}
	return tw.Flush()
}

func orQuotedEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// sourceOf says where a flag's value came from: the command line, an
// environment variable, the config file, or the default.
func (r *runState) sourceOf(c *ucli.Context, name string) (source, origin string) {
	if r.onCommandLine(name) {
		return sourceFlag, "--" + name
	}
	if p, ok := r.fromFile[name]; ok {
		return sourceFile, p
	}
	if c.IsSet(name) {
		if _, ok := os.LookupEnv(envVar(name)); ok {
			return sourceEnv, envVar(name)
		}
	}
	return sourceDefault, ""
}

// configFileRead returns the config file applyConfigFile read, if any.
func (r *runState) configFileRead(c *ucli.Context) (string, bool) {
	path, explicit := c.String(flagConfig), c.IsSet(flagConfig)
	if explicit && path == "" {
		return "", false
	}
	if !explicit {
		dir, err := r.dataDir(c)
		if err != nil {
			return "", false
		}
		path = filepath.Join(dir, configFileName)
	}
	path = expandHome(path)
	if _, err := os.Stat(path); err != nil {
		return "", false
	}
	return path, true
}
