package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The console's sign-in sessions (R18.22). The browser's cookie holds a random
// id; Redis holds, under the id's SHA-256 (a reader of Redis learns no cookie),
// the fingerprint of the owner token it was signed in with, for the session's
// life:
//
//	console:SHA256(ID)   string: owner fingerprint, with the session's TTL
//
// Signing out deletes the record, so the cookie stops working at once in every
// process; a session whose fingerprint is not the owner token's in force (the
// token was rotated) is not one.

func (s *Store) consoleKey(id string) string {
	return s.k("console", TokenHash(id)) // the id's SHA-256, as a token's
}

// AddConsoleSession records a console session id signed in with the owner
// token whose fingerprint is owner, for ttl.
func (s *Store) AddConsoleSession(ctx context.Context, id, owner string, ttl time.Duration) error {
	return wrap(s.rdb.Set(ctx, s.consoleKey(id), owner, ttl).Err(), "add a console session")
}

// ConsoleSession returns the owner fingerprint a console session id was
// signed in with; ok=false when there is no such session (never made, signed
// out, expired).
func (s *Store) ConsoleSession(ctx context.Context, id string) (owner string, ok bool, err error) {
	v, err := s.rdb.Get(ctx, s.consoleKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read a console session: %w", err)
	}
	return v, true, nil
}

// EndConsoleSession deletes a console session (sign-out).
func (s *Store) EndConsoleSession(ctx context.Context, id string) error {
	return wrap(s.rdb.Del(ctx, s.consoleKey(id)).Err(), "end a console session")
}
