package mcp

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/protocol"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

func TestSanitizeName(t *testing.T) {
	long := strings.Repeat("a", 200)
	tests := []struct{ in, want string }{
		{"echo", "echo"},
		{"bar:upper", "bar_upper"},
		{"a.b-c_d", "a.b-c_d"},
		{"trad/ução", "trad_u__o"},
		{"sp ace", "sp_ace"},
		{"", "_"},
		{long, long[:119] + "_" + "2ea2e7d0"},
	}
	for _, tc := range tests {
		got := SanitizeName(tc.in)
		if tc.in == long {
			if len(got) != MaxToolNameLen || !strings.HasPrefix(got, long[:119]+"_") {
				t.Errorf("SanitizeName(long) = %q (%d)", got, len(got))
			}
			continue
		}
		if got != tc.want {
			t.Errorf("SanitizeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Two long names with one prefix stay apart.
	if SanitizeName(long+"x") == SanitizeName(long+"y") {
		t.Error("long names with a shared prefix collide")
	}
}

func TestAssignNames(t *testing.T) {
	long := strings.Repeat("b", 130)
	tests := []struct {
		name string
		in   []string
		want map[string]string
	}{
		{"valid names keep theirs", []string{"echo", "bar_upper", "bar:upper"},
			map[string]string{"echo": "echo", "bar_upper": "bar_upper", "bar:upper": "bar_upper_2"}},
		{"sorted order", []string{"a;b", "a:b", "a/b"},
			map[string]string{"a/b": "a_b", "a:b": "a_b_2", "a;b": "a_b_3"}},
		{"suffix taken", []string{"a:b", "a/b", "a_b_2"},
			map[string]string{"a_b_2": "a_b_2", "a/b": "a_b", "a:b": "a_b_3"}},
		{"duplicates", []string{"x", "x"}, map[string]string{"x": "x"}},
		{"long suffix fits", []string{long + ":", long + ";"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AssignNames(tc.in)
			seen := map[string]bool{}
			for c, n := range got {
				if seen[n] {
					t.Errorf("tool name %q given twice", n)
				}
				seen[n] = true
				if len(n) > MaxToolNameLen || SanitizeName(n) != n {
					t.Errorf("%q → %q is not a valid tool name", c, n)
				}
			}
			if tc.want == nil {
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("AssignNames = %v, want %v", got, tc.want)
			}
			for c, n := range tc.want {
				if got[c] != n {
					t.Errorf("%q → %q, want %q", c, got[c], n)
				}
			}
		})
	}
}

// TestMapToolGolden maps the capabilities of testdata/golden/*.input.json
// and compares the tools (as tools/list shows them) with the .golden
// files; -update rewrites them.
func TestMapToolGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.input.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var caps []protocol.Capability
			if err := json.Unmarshal(data, &caps); err != nil {
				t.Fatal(err)
			}
			names := make([]string, len(caps))
			for i, c := range caps {
				names[i] = c.Name
			}
			assigned := AssignNames(names)
			var out []any
			for _, c := range caps {
				tool, err := MapTool(c, assigned[c.Name])
				if err != nil {
					out = append(out, map[string]string{"capability": c.Name, "error": err.Error()})
					continue
				}
				out = append(out, tool.MCP)
			}
			got, err := json.MarshalIndent(out, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := strings.TrimSuffix(f, ".input.json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s differs:\n%s", golden, got)
			}
		})
	}
}

func TestParams(t *testing.T) {
	caps := map[string]protocol.Capability{
		"object":  {Name: "o", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`)},
		"none":    {Name: "n"},
		"wrapped": {Name: "w", InputSchema: json.RawMessage(`{"type":"string","maxLength":3}`)},
	}
	tests := []struct {
		cap, args, want, wantErr string
	}{
		{"object", `{"text":"hi"}`, `{"text":"hi"}`, ""},
		{"object", `{"text":1}`, "", "INVALID_MESSAGE"},
		{"object", `{"text":"hi","x":1}`, "", "INVALID_MESSAGE"},
		{"object", ``, "", "INVALID_MESSAGE"},
		{"object", `[1]`, "", "must be a JSON object"},
		{"none", ``, "", ""},
		{"none", `{}`, "", ""},
		{"none", `{"a":[1]}`, `{"a":[1]}`, ""},
		{"wrapped", `{"value":"abc"}`, `"abc"`, ""},
		{"wrapped", `{"value":"abcd"}`, "", "INVALID_MESSAGE"},
		{"wrapped", `{"value":"a","x":1}`, "", "nothing else"},
		{"wrapped", `{}`, "", "nothing else"},
	}
	for _, tc := range tests {
		tool, err := MapTool(caps[tc.cap], "t")
		if err != nil {
			t.Fatal(err)
		}
		got, err := tool.Params(json.RawMessage(tc.args))
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(string(protocol.AsError(err).Code)+": "+err.Error(), tc.wantErr) {
				t.Errorf("%s %s: err = %v, want %q", tc.cap, tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s %s: %v", tc.cap, tc.args, err)
		case string(got) != tc.want:
			t.Errorf("%s %s: params %s, want %s", tc.cap, tc.args, got, tc.want)
		}
	}
}

func TestResult(t *testing.T) {
	tests := []struct {
		name, out, result, want string
		isErr                   bool
	}{
		{"object, no schema", "", `{"a":1}`, `{"a":1}`, false},
		{"string, no schema", "", `"hi"`, `{"result":"hi"}`, false},
		{"null", "", ``, `{"result":null}`, false},
		{"object schema", `{"type":"object","properties":{"a":{"type":"number"}}}`, `{"a":1}`, `{"a":1}`, false},
		{"object schema broken", `{"type":"object","properties":{"a":{"type":"number"}}}`, `{"a":"x"}`, "", true},
		{"wrapped schema", `{"type":"array"}`, `[1,2]`, `{"result":[1,2]}`, false},
		{"wrapped schema, object result", `{"type":["object","array"]}`, `{"a":1}`, `{"result":{"a":1}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tool, err := MapTool(protocol.Capability{Name: "x", OutputSchema: json.RawMessage(tc.out)}, "x")
			if err != nil {
				t.Fatal(err)
			}
			r := tool.Result(json.RawMessage(tc.result))
			if r.IsError != tc.isErr {
				t.Fatalf("isError = %v", r.IsError)
			}
			if tc.isErr {
				if !strings.HasPrefix(r.Content[0].(*sdk.TextContent).Text, "INTERNAL_ERROR: ") {
					t.Fatalf("text = %q", r.Content[0].(*sdk.TextContent).Text)
				}
				return
			}
			sc, _ := json.Marshal(r.StructuredContent)
			if string(sc) != tc.want || r.Content[0].(*sdk.TextContent).Text != tc.want {
				t.Fatalf("structured %s text %q, want %s", sc, r.Content[0].(*sdk.TextContent).Text, tc.want)
			}
		})
	}
}

// FuzzMapTool feeds MapTool arbitrary schemas: it never panics, and a tool
// it accepts never makes the SDK panic when registered and listed, and
// always has an object input schema.
func FuzzMapTool(f *testing.F) {
	for _, s := range []string{``, `{}`, `true`, `false`, `5`, `"x"`, `[]`, `{"type":"object"}`, `{"type":"string"}`,
		`{"type":["object"]}`, `{"$ref":"#/$defs/a","$defs":{"a":{"type":"object"}}}`, `{"type":"object","properties":{"a":{"$ref":"http://x"}}}`,
		`{"type":"object","additionalProperties":false}`, `{"type":1}`, `{"a":`} {
		f.Add(s, `{"type":"object"}`)
		f.Add(`{"type":"object"}`, s)
	}
	f.Fuzz(func(t *testing.T, in, out string) {
		tool, err := MapTool(protocol.Capability{Name: "f", InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(out)}, "f")
		if err != nil {
			return
		}
		var m map[string]any
		b, _ := json.Marshal(tool.MCP.InputSchema)
		if json.Unmarshal(b, &m) != nil || m["type"] != "object" {
			t.Fatalf("input schema %s is not an object schema", b)
		}
		srv := sdk.NewServer(&sdk.Implementation{Name: "fuzz"}, nil)
		srv.AddTool(tool.MCP, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return nil, nil })
		if _, err := json.Marshal(tool.MCP); err != nil {
			t.Fatal(err)
		}
		_, _ = tool.Params(json.RawMessage(`{"value":1}`))
		_ = tool.Result(json.RawMessage(`{"result":1}`))
	})
}
