package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

func TestLoadServices(t *testing.T) {
	ss, err := node.LoadServices(filepath.Join("testdata", "caps.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].Capability.Name != "echo" || ss[1].Capability.Name != "myagent:upper" {
		t.Fatalf("services %+v", ss)
	}
	if got := strings.Join(ss[0].Capability.Keywords, ","); got != "test" {
		t.Errorf("keywords %q", got)
	}
}

func TestParseServicesErrors(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"empty", ``, "empty"},
		{"not json", `{`, "capabilities"},
		{"wrapper without list", `{"caps":[]}`, "unknown field"},
		{"no handler", `[{"name":"a"}]`, `"handler" is required`},
		{"unknown builtin", `[{"name":"a","handler":{"builtin":"nope"}}]`, "unknown builtin"},
		{"both", `[{"name":"a","handler":{"builtin":"echo","exec":["x"]}}]`, "not both"},
		{"empty exec", `[{"name":"a","handler":{"exec":[""]}}]`, "empty"},
		{"bad timeout", `[{"name":"a","handler":{"exec":["x"],"timeout":"soon"}}]`, "duration"},
		{"typo", `[{"name":"a","descripton":"x","handler":"echo"}]`, "unknown field"},
		{"no name", `[{"handler":"echo"}]`, "name is required"},
		{"duplicate", `[{"name":"a","handler":"echo"},{"name":"a","handler":"echo"}]`, "twice"},
		{"bad schema", `[{"name":"a","input_schema":{"type":7},"handler":"echo"}]`, "input_schema"},
		{"bad acl", `[{"name":"a","authorized_requester_ids":["bob"],"handler":"echo"}]`, `authorized_requester_ids: sign: invalid agent id: "bob"`},
		{"acl entry without a client", `[{"name":"a","authorized_requester_ids":["` + meshtest.ID(t, 1).String() + `/"],"handler":"echo"}]`, "names no client"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := node.ParseServices([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func execCall(t *testing.T, h node.Handler, params string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return h.Handle(ctx, &node.Call{From: meshtest.ID(t, 1), Request: &protocol.Request{Action: "x", CorrelationID: "c", Params: json.RawMessage(params)}})
}

func TestExecHandler(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "h.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
case "$1" in
  ok) cat ;;
  env) printf '{"requester":"%s","capability":"%s"}' "$MESHAGENT_REQUESTER" "$MESHAGENT_CAPABILITY" ;;
  fail) echo "something broke" >&2; exit 3 ;;
  notjson) echo "hello" ;;
  slow) sleep 30 ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, arg, params string
		timeout           time.Duration
		want              string
		code              protocol.Code
		msg               string
	}{
		{name: "stdin to stdout", arg: "ok", params: `{"a":1}`, want: `{"a":1}`},
		{name: "environment", arg: "env", want: `{"requester":"` + meshtest.ID(t, 1).String() + `","capability":"x"}`},
		{name: "non-zero exit", arg: "fail", code: protocol.CodeInternalError, msg: "status 3: something broke"},
		{name: "not json", arg: "notjson", code: protocol.CodeInternalError, msg: "not JSON"},
		{name: "too slow", arg: "slow", timeout: 200 * time.Millisecond, code: protocol.CodeTimeout, msg: "200ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, err := execCall(t, node.ExecHandler([]string{script, tc.arg}, tc.timeout), tc.params)
			if tc.code != "" {
				pe := wantCode(t, err, tc.code)
				if !strings.Contains(pe.Message, tc.msg) {
					t.Errorf("message %q, want %q", pe.Message, tc.msg)
				}
				if time.Since(start) > 10*time.Second {
					t.Errorf("took %s", time.Since(start))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(res) != tc.want {
				t.Fatalf("result %s, want %s", res, tc.want)
			}
		})
	}
}

func TestExecCapabilityEndToEnd(t *testing.T) {
	ss, err := node.LoadServices(filepath.Join("testdata", "caps.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := meshtest.Node(t, 2, node.WithServices(ss...))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	resp, err := call(t, a, p, "myagent:upper", `{"text":"hi"}`)
	if err != nil || string(resp.Result) != `{"text":"HI"}` {
		t.Fatalf("%v %v", resp, err)
	}
	_, err = call(t, a, p, "myagent:upper", `{"txt":"hi"}`)
	wantCode(t, err, protocol.CodeInvalidMessage)
}
