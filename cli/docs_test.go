package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"
)

// docFiles are the Markdown files whose meshagent command lines a reader
// copies: the README, docs/ and the examples' and clients' READMEs.
var docFiles = []string{"../*.md", "../docs/*.md", "../examples/*/README.md", "../clients/*/README.md", "../contrib/*/README.md"}

// TestDocumentedCommands checks every meshagent command line the
// documentation shows, in code blocks and in inline code: the command
// (and subcommand) exists and it has every flag the line gives it. A
// renamed flag or command then fails here rather than in a newcomer's
// terminal; a command no document shows fails too. It checks names only;
// what the commands do is the other tests' work.
func TestDocumentedCommands(t *testing.T) {
	app := NewApp(io.Discard, io.Discard)
	var files []string
	for _, g := range docFiles {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	checked, shown := 0, map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range documentedCommands(string(b)) {
			checked++
			if len(c.words) > 1 {
				shown[c.words[1]] = true
			}
			if err := checkCommandLine(app, c.words); err != nil {
				t.Errorf("%s:%d: %s\n\t%s", f, c.line, err, strings.Join(c.words, " "))
			}
		}
	}
	for _, cmd := range app.Commands {
		if !cmd.Hidden && !slices.ContainsFunc(cmd.Names(), func(n string) bool { return shown[n] }) {
			t.Errorf("no document shows meshagent %s", cmd.Name)
		}
	}
	t.Logf("%d command lines in %d files", checked, len(files))
	// The README alone shows dozens; a parser that finds none is broken.
	if checked < 50 {
		t.Fatalf("found %d meshagent command lines in %d files; the extraction is broken", checked, len(files))
	}
}

// docCommand is one meshagent command line of a document: its words,
// "meshagent" first, and the line it starts on.
type docCommand struct {
	words []string
	line  int
}

var (
	// A command starts a line of a code block (after a prompt, ./ or
	// bin/), or an inline code span.
	blockCommand  = regexp.MustCompile(`^\s*(?:\$\s+)?(?:\./)?(?:bin/)?meshagent\s`)
	inlineCommand = regexp.MustCompile("`((?:\\./)?(?:bin/)?meshagent [^`]+)`")
	// The indented flags that carry a synopsis over to its next lines.
	synopsisFlags = regexp.MustCompile(`^\s+\[?--`)
	// Placeholders such as <A's agent id> stand for one word.
	placeholder = regexp.MustCompile(`<[^<>()]*>`)
)

// documentedCommands returns the meshagent command lines of a Markdown
// document.
func documentedCommands(doc string) []docCommand {
	var out []docCommand
	lines := strings.Split(doc, "\n")
	inBlock := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			if strings.Contains(l, "did you mean") {
				continue // a mistyped command shown with its suggestion
			}
			for _, m := range inlineCommand.FindAllStringSubmatch(l, -1) {
				out = append(out, docCommand{words: shellWords(m[1]), line: i + 1})
			}
			continue
		}
		if !blockCommand.MatchString(l) {
			continue
		}
		start := i
		cmd := strings.TrimSpace(l)
		for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
		}
		// A synopsis goes on with indented lines of flags.
		for i+1 < len(lines) && synopsisFlags.MatchString(lines[i+1]) {
			i++
			cmd += " " + strings.TrimSpace(lines[i])
		}
		out = append(out, docCommand{words: shellWords(cmd), line: start + 1})
	}
	return out
}

// shellWords splits a command line into words as a POSIX shell would for
// the simple lines documentation shows: quotes, comments, and the end of
// the command at a pipe, a list or a redirection.
func shellWords(s string) []string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "$ ")
	s = placeholder.ReplaceAllString(s, "PLACEHOLDER")
	var (
		words  []string
		cur    strings.Builder
		inWord bool
	)
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			flush()
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				end = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				cur.WriteByte(s[j])
			}
			i = j
			inWord = true
		case c == '#' && !inWord, c == '|', c == '&', c == ';', c == '>', c == '<':
			flush()
			return words
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words
}

// checkCommandLine reports a command or flag of words (meshagent first)
// that the app does not have.
func checkCommandLine(app *ucli.App, words []string) error {
	if len(words) < 2 {
		return nil // "meshagent" alone, in prose
	}
	rest := words[1:]
	if rest[0] == "help" { // meshagent help [COMMAND]
		rest = rest[1:]
		if len(rest) == 0 {
			return nil
		}
	}
	if isPlaceholder(rest[0]) {
		return nil // meshagent COMMAND --help
	}
	var cmd *ucli.Command
	commands := app.Commands
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		next := findCommand(commands, rest[0])
		if next == nil {
			break
		}
		cmd, commands, rest = next, next.Subcommands, rest[1:]
	}
	if cmd == nil {
		if strings.HasPrefix(words[1], "-") {
			return checkFlags(app.Flags, nil, words[1:])
		}
		return fmt.Errorf("no command %q", words[1])
	}
	return checkFlags(cmd.Flags, app.Flags, rest)
}

// isPlaceholder reports whether a word stands for any command: a <…>
// placeholder or a name in capitals such as COMMAND.
func isPlaceholder(w string) bool {
	return w == "PLACEHOLDER" || w == strings.ToUpper(w) && strings.ToLower(w) != w
}

// findCommand returns the command of commands named (or aliased) name.
func findCommand(commands []*ucli.Command, name string) *ucli.Command {
	for _, c := range commands {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// checkFlags reports the first word of args that names a flag in neither
// set. "--" ends the flags; help flags are always there. A synopsis's
// brackets and alternatives ("[--json]", "--approve|--reject") are read
// as the flags they hold.
func checkFlags(flags, global []ucli.Flag, args []string) error {
	var words []string
	for _, a := range args {
		words = append(words, strings.Split(strings.Trim(a, "[]()…,"), "|")...)
	}
	for _, a := range words {
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" || strings.Trim(a, "-0123456789.") == "" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "help" || name == "h" || hasFlag(flags, name) || hasFlag(global, name) {
			continue
		}
		return fmt.Errorf("no flag --%s", name)
	}
	return nil
}

func hasFlag(flags []ucli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}
