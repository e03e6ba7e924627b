package pubsub

import (
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// meshTag is the connection manager tag GossipSub (its tag tracer)
// protects a peer with while the peer is in the mesh of GossipSub topic
// gt.
func meshTag(gt string) string { return "pubsub:" + gt }

// unprotectHost is the host GossipSub is given when some families' mesh
// peers are not to be protected (WithUnprotectedFamilies): the same host,
// whose connection manager ignores GossipSub's protection of those
// topics' mesh peers. Everything else reaches h unchanged.
type unprotectHost struct {
	host.Host
	cm connmgr.ConnManager
}

func (u unprotectHost) ConnManager() connmgr.ConnManager { return u.cm }

// unprotectCM drops Protect calls with one of skip's tags.
type unprotectCM struct {
	connmgr.ConnManager
	skip map[string]bool
}

func (u unprotectCM) Protect(p peer.ID, tag string) {
	if !u.skip[tag] {
		u.ConnManager.Protect(p, tag)
	}
}

// unprotectDecayer is unprotectCM over a manager with decaying tags,
// which GossipSub uses for its delivery tags when the manager has them.
type unprotectDecayer struct {
	unprotectCM
	connmgr.Decayer
}

// Close resolves the two embedded Close methods: the manager's.
func (u unprotectDecayer) Close() error { return u.unprotectCM.Close() }

// withUnprotected returns h, or when families is not empty a host whose
// connection manager does not let GossipSub protect those families' mesh
// peers.
func withUnprotected(h host.Host, families []string) host.Host {
	if len(families) == 0 {
		return h
	}
	skip := make(map[string]bool, len(families))
	for _, f := range families {
		skip[meshTag(GossipPrefix+f)] = true
	}
	cm := unprotectCM{ConnManager: h.ConnManager(), skip: skip}
	if d, ok := connmgr.SupportsDecay(h.ConnManager()); ok {
		return unprotectHost{Host: h, cm: unprotectDecayer{unprotectCM: cm, Decayer: d}}
	}
	return unprotectHost{Host: h, cm: cm}
}
