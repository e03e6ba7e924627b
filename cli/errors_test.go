package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/protocol"
)

// TestExitCodes checks every AgentProtocol code has its own status, apart
// from the generic ones, and that the table in doc.go says the same.
func TestExitCodes(t *testing.T) {
	want := map[protocol.Code]int{
		protocol.CodeInvalidMessage:         3,
		protocol.CodeInvalidSignature:       4,
		protocol.CodeUnknownAgent:           5,
		protocol.CodeCapabilityNotSupported: 6,
		protocol.CodeTimeout:                7,
		protocol.CodeRateLimited:            8,
		protocol.CodeInternalError:          9,
		protocol.CodeUnauthorized:           10,
	}
	seen := map[int]protocol.Code{}
	for _, code := range protocol.Codes {
		got := ExitCodeFor(code)
		if got != want[code] {
			t.Errorf("ExitCodeFor(%s) = %d, want %d", code, got, want[code])
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s share exit status %d", code, other, got)
		}
		seen[got] = code
		if got == ExitOK || got == ExitFailure || got == ExitUsage || got == ExitInterrupted {
			t.Errorf("%s uses a reserved exit status %d", code, got)
		}
		if codeMessages[code] == "" {
			t.Errorf("%s has no message for people", code)
		}
	}
	if got := ExitCodeFor("SOMETHING_NEW"); got != ExitFailure {
		t.Errorf("an unknown code exits %d, want %d", got, ExitFailure)
	}

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^//\s*\|\s*(\d+)\s*\|\s*([A-Z_]+):`).FindAllSubmatch(doc, -1)
	if len(rows) != len(protocol.Codes) {
		t.Fatalf("doc.go documents %d codes, want %d", len(rows), len(protocol.Codes))
	}
	for _, row := range rows {
		status, _ := strconv.Atoi(string(row[1]))
		if code := protocol.Code(row[2]); ExitCodeFor(code) != status {
			t.Errorf("doc.go says %s exits %d; ExitCodeFor says %d", code, status, ExitCodeFor(code))
		}
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain error", errors.New("boom"), ExitFailure},
		{"usage", usageErrorf("bad flag"), ExitUsage},
		{"protocol error", protocol.Errorf(protocol.CodeTimeout, "slow"), 7},
		{"wrapped protocol error", fmt.Errorf("call: %w", protocol.Errorf(protocol.CodeUnauthorized, "no")), 10},
		{"protocolExit", protocolExit("call", protocol.Errorf(protocol.CodeCapabilityNotSupported, "no")), 6},
		{"ExitError", &ExitError{Code: 42, Err: errors.New("x")}, 42},
		{"interrupted", context.Canceled, ExitInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitStatus(tc.err); got != tc.want {
				t.Errorf("exitStatus(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}

	pe := protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent does not support shout capability").
		WithDetails(map[string]any{"requested": "shout", "available": []string{"echo", "upper"}})
	err := protocolExit("call", pe)
	want := "call: CAPABILITY_NOT_SUPPORTED: the agent does not offer that capability (agent does not support shout capability); it offers: echo, upper"
	if err.Error() != want {
		t.Errorf("message\n  %s\nwant\n  %s", err, want)
	}
	var got *protocol.Error
	if !errors.As(err, &got) || got != pe {
		t.Error("protocolExit hides the *protocol.Error from errors.As")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no command", nil, "a command is required"},
		{"unknown command", []string{"fly"}, `unknown command "fly"`},
		{"unknown flag", []string{"id", "--nope"}, "flag provided but not defined: --nope"},
		{"unknown flag with one dash", []string{"verify", "-api", "x"}, "flag provided but not defined: --api; run `meshagent verify --help`"},
		{"flag without its value", []string{"node", "--name"}, "flag needs an argument: --name; run `meshagent node --help`"},
		{"call without args", []string{"call"}, "call needs AGENT_ID and CAPABILITY"},
		{"call bad agent", []string{"call", "bob", "echo"}, `AGENT_ID "bob" is not an agent id`},
		{"call bad capability", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "two words"}, "must not contain whitespace"},
		{"call params not an object", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--params", "[1]"}, "invalid --params: params must be a JSON object"},
		{"call params invalid JSON", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--params", `{"a":}`}, "invalid --params: not valid JSON (invalid character '}' at start of value within \"/a\" after offset 5)"},
		{"call params duplicate keys", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--params", `{"a":1,"a":2}`}, "invalid --params"},
		{"call params file missing", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--params", "@/nonexistent.json"}, "invalid --params"},
		{"call zero timeout", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--timeout", "0s"}, "invalid --timeout: 0s is not a positive duration"},
		{"call api off", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--api", "off"}, "call needs the local API of a running node"},
		{"peers bad api", []string{"peers", "--api", "nowhere"}, "invalid --api"},
		// The flag package's reason for these is "parse error": each says what the flag takes.
		{"call duration in days", []string{"call", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo", "--deadline", "7d"},
			`invalid value "7d" for flag --deadline: time: unknown unit "d" in duration "7d" (units: ns, us, ms, s, m, h; a day is 24h); run ` + "`meshagent call --help`"},
		{"call duration before args", []string{"call", "--timeout=soon", "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei", "echo"},
			`invalid value "soon" for flag --timeout: time: invalid duration "soon" (units:`},
		{"node bool not a bool", []string{"node", "--no-mdns=maybe"}, `invalid value "maybe" for flag --no-mdns: must be true or false; run ` + "`meshagent node --help`"},
		{"history limit not a number", []string{"history", "--limit", "ten"}, `invalid value "ten" for flag --limit: must be a whole number`},
		{"history limit out of range", []string{"history", "--limit", "99999999999999999999"}, `invalid value "99999999999999999999" for flag --limit: value out of range`},
		{"consensus threshold not a number", []string{"consensus", "--threshold", "most"}, `invalid value "most" for flag --threshold: must be a number`},
		{"mcp on a public address", []string{"mcp", "--http", "0.0.0.0:7981"}, "invalid --http: 0.0.0.0:7981 is not a loopback address, and the MCP endpoint has no authentication"},
		{"a2a on a public address", []string{"a2a", "--listen", ":8080"}, "invalid --listen: :8080 is not a loopback address, and the A2A gateway has no authentication"},
		{"task list unknown state", []string{"task", "list", "--state", "done"}, `invalid --state: "DONE" is not a task state: one of PENDING, VALIDATING, APPROVED, REJECTED, ESCALATED, COMPLETED, FAILED, CANCELLED`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, "", tc.args...)
			res.wantCode(t, ExitUsage)
			res.wantStderr(t, tc.msg)
		})
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestPublicEndpointsOnPurpose: with --public, mcp --http and a2a
// --listen take a non-loopback address (and go on to the node).
func TestPublicEndpointsOnPurpose(t *testing.T) {
	api := freeAddr(t)
	for _, args := range [][]string{
		{"mcp", "--http", "0.0.0.0:0", "--public", "--api", api},
		{"a2a", "--listen", "0.0.0.0:0", "--public", "--api", api},
	} {
		res := runCLI(t, "", args...)
		res.wantCode(t, ExitFailure)
		res.wantStderr(t, "no meshagent node is listening on "+api)
	}
}

func TestNoNodeListening(t *testing.T) {
	addr := freeAddr(t)
	const id = "12D3KooWS4rYrQetEWxjkxqKRboPCSDuzMEVkyEenXo2wdJNfuei"
	for _, args := range [][]string{
		{"call", id, "echo", "--params", `{"text":"hi"}`, "--api", addr},
		{"peers", "--api", addr},
	} {
		res := runCLI(t, "", args...)
		res.wantCode(t, ExitFailure)
		res.wantStderr(t, "no meshagent node is listening on "+addr+": start one with `meshagent node`")
	}

	// With the default address the hint is to pass --api.
	t.Setenv("MESHAGENT_API", addr)
	res := runCLI(t, "", "peers")
	res.wantCode(t, ExitFailure)
	res.wantStderr(t, "check --api (from MESHAGENT_API)")
}

// TestHelpCommand: `meshagent help` and `meshagent help COMMAND`, as the
// README shows them, print the help and succeed.
func TestHelpCommand(t *testing.T) {
	res := runCLI(t, "", "help")
	res.wantCode(t, ExitOK)
	if !strings.Contains(res.stdout, "USAGE:") || !strings.Contains(res.stdout, "call") {
		t.Errorf("meshagent help printed %q", res.stdout)
	}
	res = runCLI(t, "", "help", "call")
	res.wantCode(t, ExitOK)
	if !strings.Contains(res.stdout, "meshagent call - ") || !strings.Contains(res.stdout, "--params") {
		t.Errorf("meshagent help call printed %q", res.stdout)
	}
	res = runCLI(t, "", "help", "stauts")
	res.wantCode(t, ExitUsage)
	res.wantStderr(t, `unknown command "stauts"`, `did you mean "status"`)
}
