// Command broker is the e2e suite's device broker: it opens the device node named by each
// environment variable given as an argument (UDEV_DEVNODE for Akri's udev brokers; a user of
// two devices names both), writes and reads a few bytes, says so on stdout with the identity it
// ran as, and holds the devices until it is stopped. It fails (exit 1) when a device cannot be
// opened.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: broker ENV_VAR...")
		os.Exit(2)
	}
	groups, _ := os.Getgroups()
	who := fmt.Sprintf("uid=%d gid=%d groups=%v", os.Getuid(), os.Getgid(), groups)
	var held []*os.File
	for _, env := range os.Args[1:] {
		path := os.Getenv(env)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			fmt.Printf("broker: %s: cannot open %q: %v\n", who, path, err)
			os.Exit(1)
		}
		w, werr := f.Write([]byte("ping"))
		buf := make([]byte, 4)
		r, rerr := f.Read(buf)
		if werr != nil || rerr != nil {
			fmt.Printf("broker: %s: %s: write %v, read %v\n", who, path, werr, rerr)
			os.Exit(1)
		}
		fmt.Printf("broker: %s: opened %s: wrote %d bytes, read %d bytes\n", who, path, w, r)
		held = append(held, f)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	for _, f := range held {
		_ = f.Close()
	}
	fmt.Println("broker: stopped")
}
