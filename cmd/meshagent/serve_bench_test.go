//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// serveSamples is how many serial calls each row of BenchmarkServe times.
const serveSamples = 400

// pythonEcho serves "pyecho" through the node at argv[1] with the
// Python client package (clients/python, put on sys.path by the
// benchmark) and answers each request with its params.
const pythonEcho = `
import asyncio, sys
import meshagent_client as mc
async def main():
    async with await mc.connect(sys.argv[1], "bench-pyecho") as mesh:
        await mesh.serve({"name": "pyecho", "description": "echo, in Python"}, lambda req: req.params)
        print("serving", flush=True)
        await mesh.wait_closed()
asyncio.run(main())
`

// BenchmarkServe times a call's round trip from a Go caller through its
// node to a provider node, answered there by the built-in echo, by a Go
// rpc.Client serving through the provider's local API, and by a Python
// agent doing the same (when python3 has websockets), in one run. It
// prints p50 and p99 of each and reports the Go client's (and, as
// ratios, the overhead over the built-in echo).
//
//	go test ./cmd/meshagent -run '^$' -bench Serve -benchtime 1x
func BenchmarkServe(b *testing.B) {
	dir := b.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(b, caps, `[{"name":"echo","description":"says it back","handler":"echo"}]`)
	provider := startNode(b, "provider", "--data", filepath.Join(dir, "p"), "--capabilities", caps)
	caller := startNode(b, "caller", "--data", filepath.Join(dir, "c"), "--bootstrap", provider.started.Addrs[0])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A Go agent serving "goecho" through the provider's local API.
	var agent *rpc.Client
	ready := make(chan struct{})
	agent, err := rpc.Dial(ctx, provider.started.API, rpc.WithClientID("bench-goecho"),
		rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
			<-ready
			if method != rpc.MethodMeshHandle {
				return nil, rpc.Errorf(rpc.CodeMethodNotFound, "no %s", method)
			}
			var p rpc.HandleParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			return p.Params, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	defer agent.Close()
	close(ready)
	if err := agent.Call(ctx, rpc.MethodMeshServe, map[string]any{"capabilities": []map[string]string{{"name": "goecho", "description": "echo, in Go"}}}, nil); err != nil {
		b.Fatal(err)
	}
	rows := []string{"echo", "goecho"}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import websockets").CombinedOutput(); err == nil {
		py := exec.Command("/usr/bin/python3", "-c", pythonEcho, "ws://"+provider.started.API+"/")
		py.Env = append(env(b), "PYTHONPATH="+filepath.Join("..", "..", "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
		out := &syncBuffer{}
		py.Stdout, py.Stderr = out, out
		if err := py.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = py.Process.Kill(); _ = py.Wait() }()
		wait.For(b, 30*time.Second, func() error {
			if !strings.Contains(out.String(), "serving") {
				return fmt.Errorf("the Python agent does not serve yet: %s", out)
			}
			return nil
		})
		rows = append(rows, "pyecho")
	} else {
		b.Logf("no Python row: /usr/bin/python3 cannot import websockets: %s", out)
	}

	cl, err := rpc.Dial(ctx, caller.started.API)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	to := provider.started.AgentID
	wait.For(b, 30*time.Second, func() error {
		for _, name := range rows {
			if _, err := cl.MeshCall(ctx, protocol.CallRequest{To: to, Action: name, Params: json.RawMessage(`{"n":0}`), Timeout: 5 * time.Second}, nil); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})

	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		// Interleaved, so that every row sees the same machine load.
		for i := range serveSamples {
			for _, name := range rows {
				params := json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"the quick brown fox"}`, i))
				start := time.Now()
				resp, err := cl.MeshCall(ctx, protocol.CallRequest{To: to, Action: name, Params: params, Timeout: 10 * time.Second}, nil)
				if err != nil {
					b.Fatalf("%s: %v", name, err)
				}
				lat[name] = append(lat[name], time.Since(start))
				if string(resp.Result) != `{"n":`+fmt.Sprint(i)+`,"text":"the quick brown fox"}` {
					b.Fatal(errors.New(name + " answered " + string(resp.Result)))
				}
			}
		}
	}
	b.StopTimer()

	var tbl strings.Builder
	fmt.Fprintf(&tbl, "\n%d serial calls each, caller node → provider node → handler:\n", len(lat["echo"]))
	fmt.Fprintf(&tbl, "%-28s %10s %10s\n", "", "p50", "p99")
	p50 := map[string]time.Duration{}
	labels := map[string]string{"echo": "built-in echo", "goecho": "Go rpc.Client (local API)", "pyecho": "Python agent (local API)"}
	for _, name := range rows {
		d := lat[name]
		slices.Sort(d)
		p50[name] = d[len(d)/2]
		fmt.Fprintf(&tbl, "%-28s %10s %10s\n", labels[name], d[len(d)/2].Round(time.Microsecond), d[len(d)*99/100].Round(time.Microsecond))
	}
	b.Log(tbl.String())
	b.ReportMetric(float64(p50["echo"].Microseconds()), "echo-p50-µs")
	b.ReportMetric(float64(p50["goecho"].Microseconds()), "go-p50-µs")
	b.ReportMetric(float64(p50["goecho"])/float64(p50["echo"]), "go/echo")
	if p, ok := p50["pyecho"]; ok {
		b.ReportMetric(float64(p.Microseconds()), "py-p50-µs")
	}
}
