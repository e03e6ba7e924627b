package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// Flag names. Each flag's environment variable is MESHAGENT_ followed by
// its name in upper case with dashes as underscores (envVar), and its key
// in the config file is its name.
const (
	flagConfig          = "config"
	flagData            = "data"
	flagExchange        = "exchange"
	flagAgentTokens     = "agent-tokens"
	flagAgentRate       = "agent-rate"
	flagLogLevel        = "log-level"
	flagLogFormat       = "log-format"
	flagKey             = "key"
	flagJSON            = "json"
	flagListen          = "listen"
	flagBootstrap       = "bootstrap"
	flagName            = "name"
	flagCapabilities    = "capabilities"
	flagAPI             = "api"
	flagAPIPublic       = "api-public"
	flagPublic          = "public" // mcp's --http and a2a's --listen on a non-loopback address
	flagMetrics         = "metrics"
	flagNoMDNS          = "no-mdns"
	flagShutdownTimeout = "shutdown-timeout"
	flagHeartbeat       = "heartbeat"
	flagCapsPoll        = "capabilities-poll"
	flagRelay           = "relay"
	flagPolicy          = "policy"
	flagWS              = "ws"
	flagPersonaType     = "persona-type"
	flagKeepHistory     = "keep-history"
	flagKeepAge         = "keep-history-age"
	flagKeepBytes       = "keep-history-bytes"
	flagHoldMessages    = "hold-messages"
	flagMailbox         = "mailbox"
	flagOutboxTTL       = "outbox-ttl"
	flagAudit           = "audit"
	flagAuditBodies     = "audit-bodies"
	flagDirect          = "direct"
	flagRequesterRate   = "requester-rate"
	flagRequesterBurst  = "requester-burst"
	flagParams          = "params"
	flagTimeout         = "timeout"
)

// Defaults that are not plain flag values.
const (
	defaultDataDir    = ".meshagent" // under the home directory
	keyFileName       = "identity.key"
	configFileName    = "config.json"
	defaultAPIAddr    = "127.0.0.1:7892"
	maxConfigFileSize = 1 << 20
)

// pathFlags name files or directories; a relative path in the config file
// is relative to the file's directory.
var pathFlags = map[string]bool{flagData: true, flagKey: true, flagCapabilities: true, flagExchange: true, flagAgentTokens: true}

// notFromFile are flags a command shares by name with another command but
// not by meaning, so the config file's key (the other command's) is not
// applied to them: `a2a --listen` is one HOST:PORT, a node's "listen" its
// multiaddrs.
var notFromFile = map[string]map[string]bool{"a2a": {flagA2AListen: true}}

// envVar returns the environment variable that sets a flag.
func envVar(flag string) string {
	return "MESHAGENT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func stringFlag(name, value, usage string) *ucli.StringFlag {
	return &ucli.StringFlag{Name: name, Value: value, Usage: usage, EnvVars: []string{envVar(name)}}
}

func boolFlag(name, usage string) *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: name, Usage: usage, EnvVars: []string{envVar(name)}}
}

func durationFlag(name string, value time.Duration, usage string) *ucli.DurationFlag {
	return &ucli.DurationFlag{Name: name, Value: value, Usage: usage, EnvVars: []string{envVar(name)}}
}

func sliceFlag(name, usage string) *ucli.StringSliceFlag {
	return &ucli.StringSliceFlag{Name: name, Usage: usage, EnvVars: []string{envVar(name)}}
}

// commonFlags are accepted by every command.
func commonFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{
			Name: flagConfig, EnvVars: []string{envVar(flagConfig)},
			Usage:       "config file: a JSON object whose keys are flag names; flags and MESHAGENT_* variables override it",
			DefaultText: "DIR/" + configFileName + " if it exists",
		},
		&ucli.StringFlag{
			Name: flagData, EnvVars: []string{envVar(flagData)},
			Usage:       "directory `DIR` where the node keeps its state (identity key, config file)",
			DefaultText: "~/" + defaultDataDir,
		},
		stringFlag(flagLogLevel, "info", "log level on stderr: debug, info, warn or error"),
		stringFlag(flagLogFormat, "text", "log format on stderr: text or json"),
	}
}

// keyFlag is --key, for the commands that use an identity.
func keyFlag() ucli.Flag {
	return &ucli.StringFlag{
		Name: flagKey, EnvVars: []string{envVar(flagKey)},
		Usage:       "identity key file `PATH` (created with mode 0600 if missing)",
		DefaultText: "DIR/" + keyFileName,
	}
}

func jsonFlag(usage string) ucli.Flag { return boolFlag(flagJSON, usage) }

func apiFlag() ucli.Flag {
	return stringFlag(flagAPI, defaultAPIAddr, "`ADDR` (host:port) of the node's local API")
}

// before runs ahead of every command: it applies the config file under the
// flags and environment variables that were given.
func (r *runState) before(c *ucli.Context) error {
	r.fromFile = map[string]string{}
	return r.applyConfigFile(c)
}

// applyConfigFile reads the config file, if any, and sets each flag of the
// running command that neither the command line nor the environment set.
// Precedence is therefore: flags > environment > config file > defaults.
// A key that is no flag of any command is an error (a typo would otherwise
// be ignored silently); keys for other commands' flags are skipped, so one
// file serves every command.
func (r *runState) applyConfigFile(c *ucli.Context) error {
	path, explicit := c.String(flagConfig), c.IsSet(flagConfig)
	if explicit && path == "" {
		return nil // --config "" disables the file
	}
	if !explicit {
		dir, err := r.dataDir(c)
		if err != nil {
			return nil // no home directory and no --data: there is no default file
		}
		path = filepath.Join(dir, configFileName)
	}
	path = expandHome(path)
	data, err := readConfigFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return r.flagError(c, flagConfig, "%v", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return usageErrorf("config file %s: must be a JSON object whose keys are flag names, e.g. {\"api\": \"127.0.0.1:7892\"}: %v", path, err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if key == flagConfig {
			return usageErrorf("config file %s: a config file cannot name another (%q); pass --config instead", path, key)
		}
		if !r.knownFlags[key] {
			return usageErrorf("config file %s: unknown key %q; keys are flag names without dashes: %s", path, key, strings.Join(r.knownFlagList(), ", "))
		}
		f := lookupFlag(c.Command.Flags, key)
		if f == nil || c.IsSet(key) || notFromFile[c.Command.Name][key] {
			continue // another command's flag, or overridden by a flag or variable
		}
		values, err := configValues(f, obj[key])
		if err != nil {
			return usageErrorf("config file %s: key %q: %v", path, key, err)
		}
		for _, v := range values {
			if pathFlags[key] && v != "" && !filepath.IsAbs(v) && !strings.HasPrefix(v, "~") {
				v = filepath.Join(filepath.Dir(path), v)
			}
			if err := c.Set(key, v); err != nil {
				return usageErrorf("config file %s: key %q: %v", path, key, valueReason(f, v, err))
			}
		}
		r.fromFile[key] = path
	}
	return nil
}

func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxConfigFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfigFileSize)
	}
	return data, nil
}

// configValues converts a config file value to the strings the flag's Set
// accepts.
func configValues(f ucli.Flag, raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return nil, nil
	}
	switch f.(type) {
	case *ucli.BoolFlag:
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, errors.New("must be true or false")
		}
		return []string{fmt.Sprint(b)}, nil
	case *ucli.StringSliceFlag:
		var list []string
		if err := json.Unmarshal(raw, &list); err == nil {
			return list, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New("must be an array of strings (or one comma-separated string)")
		}
		return []string{s}, nil
	case *ucli.DurationFlag:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New(`must be a duration string such as "30s" or "1m"`)
		}
		return []string{s}, nil
	default:
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return []string{s}, nil
		}
		// A number is taken as written (e.g. "requester-rate": 5000).
		var num json.Number
		if err := json.Unmarshal(raw, &num); err != nil {
			return nil, errors.New("must be a string")
		}
		return []string{num.String()}, nil
	}
}

func lookupFlag(flags []ucli.Flag, name string) ucli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

func (r *runState) knownFlagList() []string {
	out := make([]string, 0, len(r.knownFlags))
	for k := range r.knownFlags {
		if k != flagConfig {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// source says where a flag's value came from, for error messages.
func (r *runState) source(c *ucli.Context, name string) string {
	if p, ok := r.fromFile[name]; ok {
		return fmt.Sprintf("key %q in %s", name, p)
	}
	if r.onCommandLine(name) {
		return "--" + name
	}
	if c.IsSet(name) {
		if _, ok := os.LookupEnv(envVar(name)); ok {
			return envVar(name)
		}
	}
	return "the default --" + name
}

// onCommandLine reports whether the flag was given as an argument.
func (r *runState) onCommandLine(name string) bool {
	for _, a := range r.args {
		if a == "--" {
			break
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// flagError reports an invalid flag value as a usage error that names the
// flag, where its value came from, and (in the message) what to do.
func (r *runState) flagError(c *ucli.Context, name, format string, args ...any) *ExitError {
	src := r.source(c, name)
	what := "--" + name
	if src != what {
		what += " (from " + src + ")"
	}
	return usageErrorf("invalid %s: %s", what, fmt.Sprintf(format, args...))
}

// dataDir returns --data, or ~/.meshagent.
func (r *runState) dataDir(c *ucli.Context) (string, error) {
	if d := c.String(flagData); d != "" {
		return expandHome(d), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", r.flagError(c, flagData, "no home directory to default to (%v); pass --data DIR", err)
	}
	return filepath.Join(home, defaultDataDir), nil
}

// keyPath returns --key, or DIR/identity.key.
func (r *runState) keyPath(c *ucli.Context) (string, error) {
	if k := c.String(flagKey); k != "" {
		return expandHome(k), nil
	}
	dir, err := r.dataDir(c)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, keyFileName), nil
}

// expandHome replaces a leading "~/" with the home directory, for values
// that did not pass through a shell (config file, quoted flags).
func expandHome(p string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return p
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~"))
}

// positiveDuration validates a duration flag.
func (r *runState) positiveDuration(c *ucli.Context, name string) (time.Duration, error) {
	d := c.Duration(name)
	if d <= 0 {
		return 0, r.flagError(c, name, "%s is not a positive duration; use a value such as 30s or 2m", d)
	}
	return d, nil
}
