package clients_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallPythonAsREADMESays installs the Python package the way its
// README says on a machine without PyPI: into a virtual environment that
// sees Debian's python3-websockets and python3-setuptools, with
// --no-build-isolation so pip fetches no build backend. A copy of the
// package is installed, so the checkout gets no build/ or egg-info.
func TestInstallPythonAsREADMESays(t *testing.T) {
	needPython(t)
	if out, err := exec.Command(python, "-c", "import setuptools, venv, pip").CombinedOutput(); err != nil {
		t.Skipf("%s lacks setuptools or venv (install python3-setuptools python3-venv python3-pip): %v %s", python, err, out)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(src, os.DirFS("python")); err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(dir, "venv")
	// --without-pip only saves the test ensurepip's time: the venv's
	// python runs Debian's pip, which it sees like the other packages.
	run(t, dir, python, "-m", "venv", "--system-site-packages", "--without-pip", venv)
	run(t, dir, filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "--no-build-isolation", "--no-index", src)
	// From another directory, so the import cannot come from the source.
	out := run(t, t.TempDir(), filepath.Join(venv, "bin", "python"), "-c", "import meshagent_client, sys; print(meshagent_client.__file__); print(meshagent_client.Client.__name__)")
	if !strings.Contains(out, filepath.Join(venv, "lib")) || !strings.Contains(out, "Client") {
		t.Fatalf("the installed package is not the one imported:\n%s", out)
	}
}

// TestInstallJSAsREADMESays installs the JavaScript package from a user's
// own project the way its README says (npm install --install-links PATH),
// which copies it and resolves its dependency ws, and imports it there.
func TestInstallJSAsREADMESays(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("Node.js (node) is not on PATH")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not on PATH")
	}
	abs, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"my-agent","version":"1.0.0","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, project, npm, "install", "--install-links", "--no-audit", "--no-fund", "--loglevel=error", abs)
	if _, err := os.Lstat(filepath.Join(project, "node_modules", "ws", "package.json")); err != nil {
		t.Fatalf("ws was not installed beside the client: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(project, "node_modules", "meshagent-client")); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Fatalf("meshagent-client is a link or missing (%v): a link leaves ws unresolved", err)
	}
	out := run(t, project, "node", "--input-type=module", "-e", "import { Client } from 'meshagent-client'; import WebSocket from 'ws'; console.log(typeof Client, typeof WebSocket)")
	if strings.TrimSpace(out) != "function function" {
		t.Fatalf("import from the user's project printed %q", out)
	}
}
