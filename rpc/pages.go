package rpc

// WithLoopbackPages admits, as browser clients, the pages that the
// server's own listener serves on a loopback address: a page whose origin
// is http://HOST:PORT where HOST:PORT is the listener's own loopback
// address (127.0.0.1, [::1] or localhost). That is how the status page
// served beside the local API (at /ui, through WithHTTPHandler) reaches
// the API at "/". Pages of any other origin are still refused unless
// WithOriginPatterns admits them: after DNS rebinding a hostile page's
// origin names its own domain, never a loopback literal, and a page of
// another local server has another port.
func WithLoopbackPages() Option {
	return func(c *Config) error { c.LoopbackPages = true; return nil }
}
