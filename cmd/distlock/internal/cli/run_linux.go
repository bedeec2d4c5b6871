package cli

import "syscall"

// jobProcAttr puts the command in a process group of its own, so that a
// lost lock can stop all of it, and has the kernel kill it if distlock dies
// without stopping it (SIGKILL, the OOM killer), as no one renews the lock
// then.
func jobProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
