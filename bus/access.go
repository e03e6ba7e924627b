package bus

import (
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// register puts the bus's methods on its server: subscribe, unsubscribe
// and sendMessage for anyone on a public listener (with the topic checks
// of publicTopic), the history and dead-letter methods for credentials
// that grant them; it announces the bus in initialize and reports its
// subscriptions in mesh.status.
func (b *Bus) register() {
	b.srv.HandlePublic(MethodSubscribe, b.subscribe)
	b.srv.HandlePublic(MethodUnsubscribe, b.unsubscribe)
	b.srv.HandlePublic(MethodSendMessage, b.sendMessage)
	b.srv.Handle(MethodBusHistory, b.history)
	b.srv.Handle(MethodBusDeadLetters, b.deadLetters)
	b.srv.Handle(MethodBusReplay, b.replay)
	b.srv.SetCapabilities(rpc.BusCapabilities{Subscribe: true, Publish: true, Topics: []string{"inbound:*", "outbound:*", "agent:*"}})
	b.srv.OnStatus(func(res *rpc.StatusResult) {
		res.Topics, res.BusSubscriptions = b.subs.patterns()
	})
}

// publicTopic applies a public listener's rules to the topic of a
// subscribe or sendMessage: a credential's topic patterns bound what it
// subscribes to and sends on, and calling a mesh agent through
// agent:<id> needs a credential granting mesh.call. Malformed params pass:
// the method itself refuses them.
func (b *Bus) publicTopic(r *rpc.Request) error {
	if !r.Conn.Public() {
		return nil
	}
	var p struct {
		Topic string `json:"topic"`
	}
	if protocol.DecodeStrict(r.Params, &p, protocol.AllowUnknown()) != nil || p.Topic == "" {
		return nil
	}
	cred := r.Conn.Credential().Current()
	if r.Method == MethodSubscribe && !cred.AllowsPattern(p.Topic) {
		return rpc.Errorf(rpc.CodeForbidden, "forbidden: the credential %q does not allow subscribing to %q", cred.Name, p.Topic)
	}
	if r.Method == MethodSendMessage {
		if !cred.AllowsTopic(p.Topic) {
			return rpc.Errorf(rpc.CodeForbidden, "forbidden: the credential %q does not allow sending on %q", cred.Name, p.Topic)
		}
		if b.toMeshAgentTopic(p.Topic) && !cred.AllowsMethod(rpc.MethodMeshCall) {
			return rpc.Errorf(rpc.CodeForbidden, "forbidden: %s would call a mesh agent as this relay, which needs a credential granting %s", p.Topic, rpc.MethodMeshCall)
		}
	}
	return nil
}

// toMeshAgentTopic reports whether sendMessage on topic would become a
// mesh call: agent:<mesh agent id> that no local client subscribes to.
func (b *Bus) toMeshAgentTopic(topic string) bool {
	_, ok := b.meshAgent(topic)
	return ok && len(b.subs.route(topic)) == 0
}
