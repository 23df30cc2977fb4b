// Command pause is the real node's sandbox (pause) image: the first process of every pod. It holds
// the pod's namespaces open, reaps the orphans it inherits as PID 1 and exits on SIGTERM or SIGINT.
// Built here because no image can be pulled from outside on the project's machines.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
