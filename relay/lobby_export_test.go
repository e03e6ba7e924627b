package relay

// SetLobbyTokens replaces the lobby's token generator, so that transcripts
// can name the tokens REGISTER_ACK hands out. Call it before serving.
func SetLobbyTokens(l *Lobby, next func() string) { l.newToken = next }
