//go:build !linux

package cli

import "syscall"

// jobProcAttr puts the command in a process group of its own, so that a
// lost lock can stop all of it.
func jobProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
