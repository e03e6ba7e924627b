// Package daemon assembles a running process. It starts with the pair
// every local API serves, the JSON-RPC server and seed 001's bus on it
// (BusServer), put together here only and used by cli and by the test
// helpers (internal/rpctest). Like every library package it prints
// nothing.
package daemon
