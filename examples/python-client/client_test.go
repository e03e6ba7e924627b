package pyclient

import (
	"os/exec"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/internal/clienttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// python is Debian's interpreter, the one that sees python3-websockets.
const python = "/usr/bin/python3"

// TestClient runs client.py against a node's bus: the script's message on
// outbound:42 is processed by a Go subscriber whose ack the script prints,
// and a message the Go peer sends to the script's subscription is printed
// by the script, which acknowledges it and exits.
func TestClient(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import websockets").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import websockets (install python3-websockets): %v %s", python, err, out)
	}
	clienttest.Run(t, clienttest.Client{
		Command: []string{python, "client.py"},
		// client.py imports meshagent_client from clients/python: write
		// no bytecode there.
		Env: []string{"PYTHONDONTWRITEBYTECODE=1"},
		ID:  "py-client", Topic: "inbound:py", Text: "hello from python",
	})
}
