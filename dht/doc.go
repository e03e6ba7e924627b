// Package dht is the capability directory: a private Kademlia DHT in which
// each agent announces provider records for the capabilities it serves.
//
// The DHT speaks its own protocol prefix ("/meshagent"), so it never joins
// or answers the public IPFS DHT. Every agent runs it in server mode: the
// mesh is a private network of peers that are all expected to be reachable,
// and a client-mode agent would not store records, which shrinks the
// directory and lengthens lookups on small meshes.
//
// # Keys
//
// A capability name and each of its keywords map to a CID (raw codec,
// sha256 multihash) of "meshagent:capability:"+name and
// "meshagent:keyword:"+keyword. See CapabilityKey and KeywordKey.
//
// # Expiry and re-providing
//
// Provider records are kept by the peers closest to a key for the provider
// record TTL (WithProviderTTL); the TTL is enforced by the peers that store a
// record, so it is a network-wide setting and every agent of one mesh must
// use the same value. Advertise replaces the advertised set, provides every
// key at once and re-provides the set every re-provide interval
// (WithReprovideInterval, half the TTL by default).
//
// A provide stores the record at the peers closest to the key that its
// lookup finds, so a record provided while the agent or the mesh is
// joining lands on the few peers it knows, not on those later lookups end
// at. The directory therefore also provides its keys (capabilities' and
// the topics' it advertises) again each time its routing table has doubled
// since the last round: log2 of the table's size in rounds, nearly all
// while joining. Each provide is bounded (a minute), so one stuck on dials
// that time out cannot hold the next round back. Kademlia cannot revoke a
// record: a key dropped from the set is simply no longer re-provided and
// disappears from the directory once its records expire, at most one TTL
// later. The same holds for an agent that stops.
//
// # Records are hints
//
// Provider records are unsigned: anyone can claim to provide anything.
// FindProviders returns the raw hints; Find takes a confirm function (the
// node passes its signed hello exchange) and only yields providers whose
// confirmed capabilities match the query.
//
// # Topic peers
//
// TopicDiscovery offers the same directory to go-libp2p-pubsub as a
// discovery service: subscribers of a topic family provide TopicKey of its
// namespace, so publishers and subscribers find each other even when no
// path of subscribers connects them. Only TopicAdvertisers of them add a
// record (a subscriber that finds that many does not), and each waits a
// random part of AdvertiseSpread before it looks, so that subscribers
// joining together do not all find none and all provide.
//
// # Configuration and lifecycle
//
// New takes options (options.go): defaults, then the options in order,
// then one validation of the whole, in which the re-provide interval
// defaults to half the TTL; a refused configuration wraps
// ErrInvalidConfig. Without WithLogger the directory logs to
// slog.Default(). WithMetrics counts provides and provider lookups, with
// their durations. New starts the DHT; Close stops the re-provide loop and
// the DHT, but not the host, which the caller owns.
package dht
