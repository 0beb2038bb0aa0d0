package store

import bolt "go.etcd.io/bbolt"

// DB exposes meta.db to this package's external tests, which plant damaged
// records below the metadata plane (a torn tree, a bad base ref); the
// exported API offers only the plane (Meta).
func (s *Store) DB() *bolt.DB { return s.db }
