package gitsynctest

import (
	"net"
	"testing"
)

// Silent starts a server on loopback that accepts connections and never answers (a hung proxy,
// a wedged host), closed when the test ends, and returns a git URL on it.
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range held {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/" + RepoPath
}
