// Package relay holds, until it moves to a package of its own, the seed
// 000 lobby (Lobby, served at "/lobby" next to a relay's bus). The JSON-RPC
// server is package rpc and the seed 001 bus package bus.
//
// This package is not libp2p's circuit relay. That is a libp2p transport
// service, which the relay command switches on separately; the two share
// only a name.
package relay
