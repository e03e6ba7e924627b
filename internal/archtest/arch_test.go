package archtest

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/meshagent/meshagent/"

// mayImport is DESIGN.md's arrows as an allow-list: for each package of the
// module, the packages of the module it may import directly. What a package
// reaches transitively follows from the arrows of what it imports. A package
// without an entry fails TestEveryPackageHasARule, so a new package starts
// with a rule, not without one. Examples (and the process entry point) stand
// above everything and are not listed.
var mayImport = map[string][]string{
	// The leaf and the shared vocabulary.
	"sign":     {},
	"protocol": {"sign"},

	// Beside each other on protocol: the directory, topics, mailboxes and
	// the embedded store (which imports nothing of ours).
	"dht":     {"protocol", "sign"},
	"pubsub":  {"protocol", "sign"},
	"mailbox": {"protocol", "sign", "store"},
	"store":   {},
	"metrics": {},
	"ui":      {},
	// Shared bead contexts' pure part (documents, clocks, merge order):
	// beside protocol, no network.
	"beadctx": {"protocol", "sign"},

	// A running agent. metrics is the leaf Prometheus registry its parts
	// count into.
	"node": {"dht", "pubsub", "mailbox", "store", "metrics", "beadctx", "protocol", "sign", "internal/childproc"},

	// The edges: never node, dht or pubsub (each declares the interface it
	// needs, and *node.Node satisfies it).
	"rpc":   {"protocol", "sign", "internal/wsconn", "internal/workers"},
	"bus":   {"rpc", "store", "protocol", "sign"},
	"lobby": {"store", "protocol", "sign", "internal/wsconn"},
	// The local API's faces beyond JSON-RPC (seed 004's REST today).
	"localapi": {"rpc", "protocol", "sign"},
	// MCP and A2A speak outward as clients of a node's local API; their
	// inward handlers are adapted to node.Handler by cli.
	"mcp": {"rpc", "protocol", "sign", "internal/childproc"},
	"a2a": {"rpc", "protocol", "sign"},

	// The assembly of a process, in one place for cli and the test
	// helpers; it checks at compile time that *node.Node satisfies what
	// rpc, bus and lobby ask of a mesh.
	"daemon": {"node", "localapi", "rpc", "bus", "lobby", "mailbox", "store", "ui", "metrics", "protocol", "sign"},
	// The commands. node: the flags resolve into node options and the mcp
	// and a2a handler kinds adapt to node.Handler; bus: the bus commands
	// speak its wire types.
	"cli":           {"daemon", "mcp", "a2a", "rpc", "node", "bus", "protocol", "sign"},
	"cmd/meshagent": {"cli"},
	// The Python and JS clients' folder: a Go package only for its doc.
	"clients": {},

	// Plumbing written once. None of it imports the project above it.
	"internal/wsconn":    {"internal/workers"},
	"internal/workers":   {},
	"internal/childproc": {},
	"internal/archtest":  {},

	// Test helpers (testHelpers below): only tests import them.
	"internal/p2ptest":    {},
	"internal/testlog":    {},
	"internal/wait":       {},
	"internal/wstest":     {},
	"internal/scale":      {},
	"internal/smallfs":    {},
	"internal/fakemesh":   {"protocol", "sign"},
	"internal/meshtest":   {"node", "sign", "internal/testlog"},
	"internal/rpctest":    {"rpc", "bus", "daemon", "internal/testlog", "internal/wstest"},
	"internal/clienttest": {"rpc", "bus", "internal/meshtest", "internal/rpctest"},
}

// mayNotReach are outside packages a package must not depend on even
// transitively: the leaves stay off the network.
var mayNotReach = map[string][]string{
	"sign":     {"github.com/libp2p/go-libp2p/p2p/", "github.com/libp2p/go-libp2p-pubsub", "github.com/libp2p/go-libp2p-kad-dht", "net/http"},
	"protocol": {"github.com/libp2p/go-libp2p/p2p/", "net/http"},
	"beadctx":  {"github.com/libp2p/go-libp2p/p2p/", "net/http"},
	"rpc":      {"github.com/libp2p/go-libp2p/p2p/"},
	"bus":      {"github.com/libp2p/go-libp2p/p2p/"},
	"lobby":    {"github.com/libp2p/go-libp2p/p2p/"},
}

// mayPrint are the packages that may write to stdout, print with the log
// package or exit: the commands only.
var mayPrint = []string{"cli", "cmd/meshagent", "internal/scale"}

// testHelpers are the packages only tests may import.
var testHelpers = []string{"internal/clienttest", "internal/fakemesh", "internal/meshtest", "internal/p2ptest", "internal/rpctest", "internal/scale", "internal/smallfs", "internal/testlog", "internal/wait", "internal/wstest"}

type pkgInfo struct {
	path    string // relative to the module
	dir     string
	files   []string
	imports []string
}

func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}|{{join .Imports \",\"}}", "../../...").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	var pkgs []pkgInfo
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 4)
		if len(parts) != 4 {
			t.Fatalf("go list printed %q", line)
		}
		p := pkgInfo{path: strings.TrimPrefix(parts[0], mod), dir: parts[1]}
		if parts[2] != "" {
			p.files = strings.Split(parts[2], ",")
		}
		if parts[3] != "" {
			p.imports = strings.Split(parts[3], ",")
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func isExample(pkg string) bool { return strings.HasPrefix(pkg, "examples/") }

// TestEveryPackageHasARule fails for a package of the module without an
// entry in mayImport, and for an entry naming no package (after a rename its
// rule would otherwise check nothing).
func TestEveryPackageHasARule(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range listPackages(t) {
		seen[p.path] = true
		if _, ok := mayImport[p.path]; !ok && !isExample(p.path) {
			t.Errorf("%s has no rule in mayImport: add the arrows DESIGN.md gives it", p.path)
		}
	}
	for pkg := range mayImport {
		if !seen[pkg] {
			t.Errorf("mayImport names %s, which is not a package", pkg)
		}
	}
}

func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t) {
		allowed, ok := mayImport[p.path]
		if !ok {
			continue
		}
		for _, imp := range p.imports {
			dep, ours := strings.CutPrefix(imp, mod)
			if ours && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s; its arrows allow %v", p.path, dep, allowed)
			}
		}
	}
	for pkg, bad := range mayNotReach {
		out, err := exec.Command("go", "list", "-deps", "../../"+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if strings.HasPrefix(dep, b) {
					t.Errorf("%s must not depend on %s", pkg, dep)
				}
			}
		}
	}
}

// TestNoTestingInProduction checks direct imports: production packages
// never import testing or the test helpers, and nothing imports cli.
func TestNoTestingInProduction(t *testing.T) {
	for _, p := range listPackages(t) {
		if slices.Contains(testHelpers, p.path) {
			continue
		}
		for _, imp := range p.imports {
			switch {
			case imp == "testing":
				t.Errorf("%s imports testing in production code", p.path)
			case slices.Contains(testHelpers, strings.TrimPrefix(imp, mod)):
				t.Errorf("%s imports the test helper %s", p.path, imp)
			case imp == mod+"cli" && p.path != "cmd/meshagent":
				t.Errorf("%s imports cli; only main may", p.path)
			}
		}
	}
}

// TestLibrariesDoNotPrint holds every library package to DESIGN.md's rule
// that only the commands print or exit: no fmt.Print*, no log.Print*/Fatal*/
// Panic*, no os.Exit and no os.Stdout in production files.
func TestLibrariesDoNotPrint(t *testing.T) {
	banned := map[string][]string{
		"fmt": {"Print", "Printf", "Println"},
		"log": {"Print", "Printf", "Println", "Fatal", "Fatalf", "Fatalln", "Panic", "Panicf", "Panicln"},
		"os":  {"Exit", "Stdout"},
	}
	for _, p := range listPackages(t) {
		if slices.Contains(mayPrint, p.path) || isExample(p.path) {
			continue
		}
		for _, name := range p.files {
			path := filepath.Join(p.dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			local := map[string]string{} // local name -> import path
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				n := filepath.Base(ip)
				if imp.Name != nil {
					n = imp.Name.Name
				}
				local[n] = ip
			}
			src := selectors(f)
			for _, s := range src {
				if names, ok := banned[local[s.pkg]]; ok && slices.Contains(names, s.name) {
					t.Errorf("%s: %s.%s in a library package (only the commands print or exit)", filepath.Join(p.path, name), s.pkg, s.name)
				}
			}
		}
	}
}

// TestPackageDocs checks that every package says what it is for.
func TestPackageDocs(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{if .Doc}}ok{{end}}", "../../...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Fields(string(out)) {
		pkg, doc, _ := strings.Cut(line, "|")
		if doc != "ok" && !strings.Contains(pkg, "/examples/") {
			t.Errorf("%s has no package doc comment", pkg)
		}
	}
}
