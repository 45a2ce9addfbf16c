// Package relay holds the relay's types that api and web compile against:
// the records they show (cards, questions, refs, settings) and the typed
// results of the domain's owner operations. It imports nothing of this
// module; store keeps aliases of the records (store.Card = relay.Card), so
// the store and the domain use the very same types.
package relay
