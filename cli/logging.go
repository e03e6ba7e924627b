package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/gologshim"
	ucli "github.com/urfave/cli/v2"
)

// logFormats and logLevels are the accepted values of --log-format and
// --log-level.
var (
	logFormats = []string{"text", "json"}
	logLevels  = map[string]slog.Level{
		"debug": slog.LevelDebug,
		"info":  slog.LevelInfo,
		"warn":  slog.LevelWarn,
		"error": slog.LevelError,
	}
)

// logSettings is the validated --log-level and --log-format.
type logSettings struct {
	level  slog.Level
	format string
	// levelVar, when set, is the level loggers read at each record, so
	// that a running node's level can change (mesh.logLevel); level is
	// its initial value.
	levelVar *slog.LevelVar
}

// leveler returns the level loggers follow: levelVar when set, else the
// fixed level.
func (ls logSettings) leveler() slog.Leveler {
	if ls.levelVar != nil {
		return ls.levelVar
	}
	return ls.level
}

// parseLogSettings validates the logging flags of a command.
func (r *runState) parseLogSettings(c *ucli.Context) (logSettings, error) {
	var ls logSettings
	lvl, ok := logLevels[strings.ToLower(c.String(flagLogLevel))]
	if !ok {
		return ls, r.flagError(c, flagLogLevel, "%q is not a level; use debug, info, warn or error", c.String(flagLogLevel))
	}
	ls.level = lvl
	ls.levelVar = new(slog.LevelVar)
	ls.levelVar.Set(lvl)
	ls.format = strings.ToLower(c.String(flagLogFormat))
	if !slices.Contains(logFormats, ls.format) {
		return ls, r.flagError(c, flagLogFormat, "%q is not a format; use text or json", c.String(flagLogFormat))
	}
	return ls, nil
}

// newHandler returns a slog handler writing to w at level in format.
func newHandler(w io.Writer, level slog.Leveler, format string) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// newLogger returns the logger a command uses: structured logs on w.
func (ls logSettings) newLogger(w io.Writer) *slog.Logger {
	return slog.New(newHandler(w, ls.leveler(), ls.format))
}

// libp2pTarget is where libp2p's loggers currently write and which levels
// they let through, per subsystem.
type libp2pTarget struct {
	handler  slog.Handler // accepts every level; levelFor filters
	levelFor func(system string) slog.Level
}

var libp2pLog struct {
	once   sync.Once
	target atomic.Pointer[libp2pTarget]
}

// routeLibp2pLogs sends go-libp2p's logs (gologshim) to w in the same format
// as meshagent's own. libp2p is quiet by default: only errors, or everything
// from debug up when meshagent itself logs at debug. GOLOG_LOG_LEVEL, the
// variable libp2p and IPFS tools read (e.g. "error,swarm2=info"), overrides
// both, per subsystem; an invalid value is reported and ignored. Without
// GOLOG_LOG_LEVEL the choice follows ls's level as it changes at run time.
//
// gologshim binds a logger to the default handler on its first log line, so
// the handler is installed once per process and forwards to a target that
// each run replaces. The returned function stops forwarding to w.
func routeLibp2pLogs(w io.Writer, ls logSettings) (stop func(), err error) {
	libp2pLog.once.Do(func() { gologshim.SetDefaultHandler(libp2pHandler{}) })
	own := ls.leveler()
	levelFor := func(string) slog.Level {
		if own.Level() <= slog.LevelDebug {
			return slog.LevelDebug
		}
		return slog.LevelError
	}
	if env := os.Getenv("GOLOG_LOG_LEVEL"); env != "" {
		fallback, systems, perr := parseGologLevels(env)
		if perr != nil {
			err = fmt.Errorf("GOLOG_LOG_LEVEL=%q ignored: %w", env, perr)
		} else {
			levelFor = func(system string) slog.Level {
				if l, ok := systems[system]; ok {
					return l
				}
				return fallback
			}
		}
	}
	t := &libp2pTarget{handler: newHandler(w, slog.LevelDebug, ls.format), levelFor: levelFor}
	libp2pLog.target.Store(t)
	return func() { libp2pLog.target.CompareAndSwap(t, nil) }, err
}

// parseGologLevels reads GOLOG_LOG_LEVEL: comma-separated entries, each a
// level (the fallback, error unless given) or subsystem=level.
func parseGologLevels(s string) (fallback slog.Level, systems map[string]slog.Level, err error) {
	fallback, systems = slog.LevelError, map[string]slog.Level{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		system, level, scoped := strings.Cut(entry, "=")
		if !scoped {
			level = system
		}
		var l slog.Level
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return 0, nil, fmt.Errorf("%q is not a level (debug, info, warn, error)", level)
		}
		if scoped {
			systems[strings.TrimSpace(system)] = l
		} else {
			fallback = l
		}
	}
	return fallback, systems, nil
}

// libp2pHandler is the handler installed in gologshim. It remembers the
// WithAttrs/WithGroup calls made on it (gologshim adds "logger": subsystem)
// and replays them on the current target for each record.
type libp2pHandler struct {
	system string
	ops    []func(slog.Handler) slog.Handler
}

var _ slog.Handler = libp2pHandler{}

func (h libp2pHandler) Enabled(ctx context.Context, l slog.Level) bool {
	t := libp2pLog.target.Load()
	return t != nil && l >= t.levelFor(h.system)
}

func (h libp2pHandler) Handle(ctx context.Context, r slog.Record) error {
	t := libp2pLog.target.Load()
	if t == nil || r.Level < t.levelFor(h.system) {
		return nil
	}
	out := t.handler
	for _, op := range h.ops {
		out = op(out)
	}
	return out.Handle(ctx, r)
}

func (h libp2pHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := libp2pHandler{system: h.system, ops: append(slices.Clip(h.ops), func(x slog.Handler) slog.Handler { return x.WithAttrs(attrs) })}
	for _, a := range attrs {
		if a.Key == "logger" {
			c.system = a.Value.String()
		}
	}
	return c
}

func (h libp2pHandler) WithGroup(name string) slog.Handler {
	return libp2pHandler{system: h.system, ops: append(slices.Clip(h.ops), func(x slog.Handler) slog.Handler { return x.WithGroup(name) })}
}

// lockedWriter serialises writes from several loggers and the command's own
// messages onto one stream.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// printf writes a formatted line for people.
func (l *lockedWriter) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(l, format, args...)
}
