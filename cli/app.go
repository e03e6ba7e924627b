package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// runState is what one run of the app shares between its hooks and its
// command: the output streams, the raw arguments and where each flag's
// value came from.
type runState struct {
	stdout io.Writer
	stderr *lockedWriter
	// args are the arguments after the program name, as given.
	args []string
	// positional are the running command's arguments without its flags
	// (flags may follow them: `call ID echo --params …`).
	positional []string
	// relayMode is set while `meshagent relay` runs the node command.
	relayMode bool
	// knownFlags holds every flag name of every command: the keys a
	// config file may use.
	knownFlags map[string]bool
	// fromFile maps a flag set by the config file to the file's path.
	fromFile map[string]string
	// terminal reports whether a writer is a terminal (replaced in tests).
	terminal func(io.Writer) bool
}

// NewApp returns the meshagent command-line application. Command output
// goes to stdout, logs and messages for people to stderr, and input (sign,
// verify, --params -) is read from the app's Reader (os.Stdin unless
// replaced). Run it with Main, or with app.RunContext and map the error
// with the exit code table in the package documentation.
func NewApp(stdout, stderr io.Writer) *ucli.App {
	app, _ := newApp(stdout, stderr)
	return app
}

// newApp builds the app and returns the state its commands share, which
// tests inspect.
func newApp(stdout, stderr io.Writer) (*ucli.App, *runState) {
	r := &runState{stdout: stdout, stderr: &lockedWriter{w: stderr}, knownFlags: map[string]bool{}, terminal: isTerminal}
	commands := []*ucli.Command{
		r.idCommand(),
		r.nodeCommand(),
		r.relayCommand(),
		r.callCommand(),
		r.peersCommand(),
		r.discoverCommand(),
		r.mcpCommand(),
		r.publishCommand(),
		r.subscribeCommand(),
		r.durableCommand(),
		r.sendMessageCommand(),
		r.busSubscribeCommand(),
		r.historyCommand(),
		r.dlqCommand(),
		r.consensusCommand(),
		r.contextCommand(),
		r.a2aCommand(),
		r.taskCommand(),
		r.signCommand(),
		r.verifyCommand(),
		r.statusCommand(),
		r.connectCommand(),
		r.logLevelCommand(),
		r.configCommand(),
		r.versionCommand(),
		r.completionCommand(),
	}
	for _, cmd := range commands {
		cmd.Flags = append(cmd.Flags, commonFlags()...)
		cmd.Before = r.commandBefore
		cmd.OnUsageError = r.onUsageError
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				r.knownFlags[n] = true
			}
		}
	}
	return &ucli.App{
		Name:  "meshagent",
		Usage: "a peer-to-peer mesh for autonomous agents",
		Description: "Every flag can also be set with an environment variable MESHAGENT_<FLAG> " +
			"(upper case, dashes as underscores) or in a JSON config file (--config, by default " +
			"DIR/config.json) whose keys are flag names. Flags beat variables, variables beat " +
			"the file, the file beats defaults.\n\n" + exitStatusHelp(),
		Version:         version(),
		Writer:          stdout,
		ErrWriter:       r.stderr,
		HideHelpCommand: true,
		// Suggestions are ours (see didYouMean): urfave/cli's print on
		// stdout and suggest the nearest name however far it is.
		Suggest:              false,
		EnableBashCompletion: true,
		Commands:             commands,
		Before: func(c *ucli.Context) error {
			r.args = c.Args().Slice()
			return nil
		},
		Action: func(c *ucli.Context) error {
			if c.Args().First() == "help" {
				return showHelp(c)
			}
			if c.Args().Present() {
				return unknownCommand(c.App, c.Args().First())
			}
			_ = ucli.ShowAppHelp(c)
			return usageErrorf("a command is required")
		},
		OnUsageError: r.onUsageError,
		// Main, not urfave/cli, chooses the exit status.
		ExitErrHandler: func(*ucli.Context, error) {},
	}, r
}

// showHelp serves `meshagent help [COMMAND]`, which the built-in help
// command (hidden, so that it is not listed as a command) would have: the
// app's help, or COMMAND's.
func showHelp(c *ucli.Context) error {
	name := c.Args().Get(1)
	if name == "" {
		return ucli.ShowAppHelp(c)
	}
	if c.App.Command(name) == nil {
		return unknownCommand(c.App, name)
	}
	return ucli.ShowCommandHelp(c, name)
}

// unknownCommand is the usage error for a command app does not have,
// with the nearest name when one is close.
func unknownCommand(app *ucli.App, name string) error {
	return usageErrorf("unknown command %q%s; run `meshagent --help` to list commands", name, didYouMean(app, name))
}

// Main runs the meshagent command line and returns the process exit status.
// SIGINT and SIGTERM cancel the running command (a node shuts down
// cleanly); a second signal gets the default behaviour and ends the process
// at once.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal kills the process
	}()
	return run(ctx, NewApp(os.Stdout, os.Stderr), args)
}

// run runs app with args and turns its error into a message on the app's
// error stream and an exit status.
func run(ctx context.Context, app *ucli.App, args []string) int {
	err := app.RunContext(ctx, args)
	if err == nil || errors.Is(err, errHelpShown) {
		return ExitOK
	}
	code := exitStatus(err)
	if code == ExitInterrupted {
		fmt.Fprintln(app.ErrWriter, "meshagent: interrupted")
	} else {
		fmt.Fprintf(app.ErrWriter, "meshagent: %v\n", err)
	}
	return code
}

// commandBefore runs before each command: it picks up flags given after the
// command's arguments, then applies the config file.
func (r *runState) commandBefore(c *ucli.Context) error {
	if err := r.parseTrailingFlags(c); err != nil {
		return err
	}
	return r.before(c)
}

// parseTrailingFlags lets flags follow positional arguments, as in
// `meshagent call ID echo --params '{}'` (urfave/cli v2 stops parsing flags
// at the first argument). It sets those flags on the context and keeps the
// rest as the command's positional arguments. "--" ends flag parsing.
func (r *runState) parseTrailingFlags(c *ucli.Context) error {
	args := c.Args().Slice()
	r.positional = r.positional[:0]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			r.positional = append(r.positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			r.positional = append(r.positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "help" || name == "h" {
			_ = ucli.ShowCommandHelp(c.Lineage()[1], c.Command.Name)
			return errHelpShown
		}
		f := lookupFlag(c.Command.Flags, name)
		if f == nil {
			return usageErrorf("flag provided but not defined: %s%s; run `meshagent %s --help` for usage", a, flagSuggestion(c.Command.Flags, name), c.Command.Name)
		}
		if _, isBool := f.(*ucli.BoolFlag); isBool {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return usageErrorf("flag needs an argument: %s", a)
			}
			i++
			value = args[i]
		}
		if err := c.Set(name, value); err != nil {
			return usageErrorf("%v; run `meshagent %s --help` for usage", invalidValue(f, name, value, err), c.Command.Name)
		}
	}
	return nil
}

// onUsageError turns a flag parsing error into a usage error that says how
// to get help.
func (r *runState) onUsageError(c *ucli.Context, err error, isSubcommand bool) error {
	name := "meshagent"
	flags := c.App.Flags
	if c.Command != nil && c.Command.Name != "" {
		name += " " + c.Command.Name
		flags = c.Command.Flags
	}
	hint := ""
	if typed, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
		hint = flagSuggestion(flags, typed)
		err = fmt.Errorf("flag provided but not defined: --%s", strings.TrimLeft(typed, "-"))
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag needs an argument: "); ok {
		err = fmt.Errorf("flag needs an argument: --%s", strings.TrimLeft(name, "-"))
	}
	if m := flagValueError.FindStringSubmatch(err.Error()); m != nil {
		if value, uerr := strconv.Unquote(m[1]); uerr == nil {
			if f := lookupFlag(flags, m[2]); f != nil {
				err = invalidValue(f, m[2], value, errors.New(m[3]))
			}
		}
	}
	return usageErrorf("%v%s; run `%s --help` for usage", err, hint, name)
}

// flagValueError matches the flag package's errors for a value a flag
// refused: the value (quoted), the flag's name and the reason.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+([^:]+): (.*)$`)

// invalidValue is the error for value, which flag f (called name)
// refused with err.
func invalidValue(f ucli.Flag, name, value string, err error) error {
	return fmt.Errorf("invalid value %q for flag --%s: %w", value, name, valueReason(f, value, err))
}

// valueReason is why f refused value with err. The flag package's reason
// for a duration, a number or a boolean is only "parse error": it says
// what the flag takes instead (for a duration, the time package's reason
// and its units, since "7d" is what a user writes for a week).
func valueReason(f ucli.Flag, value string, err error) error {
	if err.Error() != "parse error" {
		return err
	}
	switch f.(type) {
	case *ucli.DurationFlag:
		if _, perr := time.ParseDuration(value); perr != nil {
			return fmt.Errorf("%w (units: ns, us, ms, s, m, h; a day is 24h)", perr)
		}
	case *ucli.BoolFlag:
		return errors.New("must be true or false")
	case *ucli.IntFlag:
		return errors.New("must be a whole number")
	case *ucli.Float64Flag:
		return errors.New("must be a number")
	}
	return err
}
