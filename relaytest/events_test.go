package relaytest

// subscribeFromTurn subscribes the watcher from inside a running turn and allows the first-subscribe card.
func (r *Relay) subscribeFromTurn(watcher Session, args map[string]any) {
	r.tb.Helper()
	args["action"] = "subscribe"
	if env, _ := r.InTurn(watcher, args, "allow"); env["ok"] != true {
		r.tb.Fatalf("subscribe failed: %v", env)
	}
}
