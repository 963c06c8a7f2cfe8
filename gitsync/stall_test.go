package gitsync

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A server that accepts the connection and never answers fails a request once the connection
// has made no progress for the stall timeout, with an error that says so; a slow server that
// keeps sending is not cut.
func TestStalledServerFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	client := &http.Client{Transport: stallingTransport(time.Second, 300*time.Millisecond)}
	start := time.Now()
	_, err = client.Get("http://" + ln.Addr().String() + "/fleet.git/info/refs?service=git-upload-pack")
	var stalled *StalledError
	require.True(t, errors.As(err, &stalled), "%v", err)
	require.Contains(t, err.Error(), "sent nothing for 300ms")
	require.Less(t, time.Since(start), 5*time.Second)

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range 10 {
			_, _ = w.Write([]byte("x"))
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	t.Cleanup(slow.Close)
	resp, err := client.Get(slow.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "a server that keeps sending is not cut, however long the whole takes")
	require.Equal(t, "xxxxxxxxxx", string(body))
}
