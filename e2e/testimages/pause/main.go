// Command pause holds a Pod's namespaces on the e2e suite's real node, as the pause image does:
// it waits for SIGTERM or SIGINT and exits.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
