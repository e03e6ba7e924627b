// Package daemon assembles a running process: the message store, the
// node, the local API (JSON-RPC with seed 001's bus, the status page,
// seed 002/003/004's HTTP surfaces, /metrics, /healthz, /readyz), a
// relay's public listener (the same bus, and seed 000's lobby bridged
// into the mesh), the metrics listener, seed 002's file exchange,
// systemd's notifications and watchdog, and the reloading of the
// settings files. It is that one job: cli resolves flags, environment
// and config file into a Config and calls Start, and the test helpers
// (internal/rpctest's bus server) use the same pieces, so a process is
// wired in one place. Like every library package it prints nothing and
// handles no signals: cli maps SIGHUP to Reload and SIGINT/SIGTERM to
// Close.
//
// # Parts and their order
//
// Start opens the store (Config.DataDir; or uses Config.Store), builds
// the node (or serves Config.Node), then the local API, the public
// listener, the metrics listener and the file exchange, then tells
// systemd READY=1 (when NOTIFY_SOCKET is set) and starts one loop that
// checks the settings files every Config.Poll and answers the watchdog
// (WATCHDOG=1 every half WatchdogSec), so a wedged reload is restarted by
// systemd. On an error it stops what it started. Close sends STOPPING=1
// and stops the loop, the exchange, the listeners (front doors first),
// then the node and the store it built, within its context.
//
// On a relay the local API and the public listener serve one BusServer:
// one subscription table, one outbox and retry loop over the store. The
// relay's own capabilities are offered beside its lobby agents' under
// names it does not use itself.
//
// # Bounds
//
// The bus server holds at most Public.MaxClients WebSocket clients
// (rpc.DefaultMaxClients by default) on the local API and the public
// listener together; the store keeps a 4 MiB reserve for a full disk and
// kept topic messages for Config.KeepAge within Config.KeepBytes. The
// settings files are read whole when their SHA-256 changes.
package daemon
