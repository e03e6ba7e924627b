package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
)

// Completion scripts for bash and zsh ask the binary for candidates
// (urfave/cli's --generate-bash-completion); fish gets a static script
// generated from the commands and flags.
const bashCompletion = `# bash completion for meshagent; load with: source <(meshagent completion bash)
_meshagent_complete() {
  local cur words
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:$COMP_CWORD}")
  local opts
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _meshagent_complete meshagent
`

const zshCompletion = `#compdef meshagent
# zsh completion for meshagent; load with: source <(meshagent completion zsh)
_meshagent() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _meshagent meshagent
`

var completionShells = []string{"bash", "zsh", "fish"}

func (r *runState) completionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "Prints a script that completes meshagent's commands and flags. Load it for the " +
			"current shell with `source <(meshagent completion bash)` (zsh likewise), or for fish with " +
			"`meshagent completion fish | source`; to keep it, write it where the shell looks " +
			"(for example /etc/bash_completion.d/meshagent, a directory in $fpath as _meshagent, or " +
			"~/.config/fish/completions/meshagent.fish).",
		Action: r.runCompletion,
	}
}

func (r *runState) runCompletion(c *ucli.Context) error {
	if len(r.positional) != 1 || !slices.Contains(completionShells, r.positional[0]) {
		return usageErrorf("completion takes one shell: bash, zsh or fish")
	}
	var script string
	switch r.positional[0] {
	case "bash":
		script = bashCompletion
	case "zsh":
		script = zshCompletion
	case "fish":
		var err error
		if script, err = c.App.ToFishCompletion(); err != nil {
			return exitErrorf(ExitFailure, "fish completion: %v", err)
		}
	}
	_, err := io.WriteString(r.stdout, script)
	return err
}

// minSuggestScore is the Jaro-Winkler similarity above which a mistyped
// name earns a "did you mean" (urfave/cli suggests its best match however
// far; "xyzzy" should not be told about "id").
const minSuggestScore = 0.8

// suggest returns the candidate most like typed, or "" when none is close.
func suggest(typed string, candidates []string) string {
	best, score := "", 0.0
	for _, c := range candidates {
		if s := smetrics.JaroWinkler(typed, c, 0.7, 4); s > score {
			best, score = c, s
		}
	}
	if score < minSuggestScore {
		return ""
	}
	return best
}

// didYouMean returns ` (did you mean "X"?)` for a mistyped command, or "".
func didYouMean(app *ucli.App, typed string) string {
	var names []string
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			names = append(names, cmd.Names()...)
		}
	}
	if s := suggest(typed, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// flagSuggestion returns " (did you mean --X?)" for a mistyped flag of
// flags, or "".
func flagSuggestion(flags []ucli.Flag, typed string) string {
	var names []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) > 1 {
				names = append(names, n)
			}
		}
	}
	if s := suggest(strings.TrimLeft(typed, "-"), names); s != "" {
		return fmt.Sprintf(" (did you mean --%s?)", s)
	}
	return ""
}
