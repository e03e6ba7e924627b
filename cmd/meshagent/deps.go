//go:build deps

// This file is never built. It keeps the modules that packages still to
// come (dht, pubsub) will use pinned in go.mod, so that `go mod tidy`
// does not drop their versions before those packages import them. Delete a
// line once a package imports that module.
package main

import (
	_ "github.com/libp2p/go-libp2p-kad-dht"
	_ "github.com/libp2p/go-libp2p-pubsub"
)
