// Package meshtest holds test-only helpers: deterministic Ed25519
// identities and nodes on loopback, connected. Waiting is internal/wait's
// job and test logging internal/testlog's; production code never imports
// any of them.
package meshtest
