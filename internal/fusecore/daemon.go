package fusecore

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Served is a mount its daemon serves until it is gone: a FUSE *Mount,
// a type wrapping one, or a mount of another kind (metafs' kernel mode)
// with the same methods.
type Served interface {
	// Wait blocks until the mount is gone (unmounted from outside or
	// by Unmount) and releases what it held.
	Wait() error
	// Unmount takes the mount away (lazily if busy); Wait returns after.
	Unmount() error
	// Summary is an account of what the mount did, one or more lines,
	// printed on SIGUSR1 and at exit.
	Summary() string
}

var _ = (Served)((*Mount)(nil))

// Daemon is the life of one mount daemon, the same for every kind of
// mount; Run carries it out.
type Daemon struct {
	Name       string // log prefix, e.g. "kaon cfsd"
	Mountpoint string
	CleanStale bool      // lazily unmount a stale mount on Mountpoint instead of failing
	Foreground bool      // serve in this process; otherwise daemonize once mounted
	LogPath    string    // the background daemon's stdout and stderr (default /dev/null)
	Out        io.Writer // where Run reports signals, unmounts and summaries (default stderr)
	// Reload runs on SIGHUP (re-read an index, say); its error is logged
	// and the mount goes on as before. Without it SIGHUP unmounts.
	Reload func() error
}

// Run checks the mountpoint (a stale FUSE mount fails, or is cleaned
// with CleanStale), goes to the background unless Foreground, catches
// SIGTERM, SIGINT, SIGHUP and SIGUSR1, calls mount, and serves the
// result until it is gone:
//
//	SIGTERM, SIGINT  unmount (lazily if busy), then exit
//	SIGHUP           Reload, or unmount without one
//	SIGUSR1          print Summary
//
// The signals are caught before mount runs, so one arriving while the
// mount is set up still ends in a clean unmount (as soon as the mount is
// up) rather than a stale mount. In the background, Run re-executes the command in a new
// session; the parent's Run returns once the child has mounted, with
// the child's mount error if any, and the parent should then exit. A
// serving Run returns once the mount is gone, with mount's or Wait's
// error.
func (d *Daemon) Run(mount func() (Served, error)) error {
	if err := checkMountpoint(d.Mountpoint, d.CleanStale, ""); err != nil {
		return err
	}
	if !d.Foreground {
		if child, err := daemonize(d.LogPath); !child {
			return err
		}
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	defer signal.Stop(sig)
	srv, err := mount()
	notifyReady(err)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	for {
		select {
		case err := <-done:
			d.logf("%s unmounted", d.Mountpoint)
			d.summary(srv)
			return err
		case s := <-sig:
			switch {
			case s == syscall.SIGUSR1:
				d.summary(srv)
			case s == syscall.SIGHUP && d.Reload != nil:
				if err := d.Reload(); err != nil {
					d.logf("reload refused: %v", err)
				}
			default:
				d.logf("%v: unmounting %s", s, d.Mountpoint)
				if err := srv.Unmount(); err != nil {
					d.logf("unmount %s: %v", d.Mountpoint, err)
				}
			}
		}
	}
}

func (d *Daemon) logf(format string, a ...any) {
	out := d.Out
	if out == nil {
		out = os.Stderr
	}
	fmt.Fprintf(out, d.Name+": "+format+"\n", a...)
}

func (d *Daemon) summary(srv Served) {
	for _, l := range strings.Split(srv.Summary(), "\n") {
		if l != "" {
			d.logf("%s", l)
		}
	}
}

const daemonEnv = "KAON_FUSE_DAEMON"

// daemonize re-executes the current command in the background (new
// session, stdio to logPath or /dev/null). In the parent it waits until
// the child calls notifyReady and then returns isChild=false with the
// child's mount error, if any. In the child it returns isChild=true.
func daemonize(logPath string) (isChild bool, err error) {
	if os.Getenv(daemonEnv) == "1" {
		return true, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return false, err
	}
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if logPath != "" {
		out, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	if err != nil {
		return false, err
	}
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	w.Close()
	out.Close()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	r.Close()
	line = strings.TrimSpace(line)
	if line == "ok" {
		_ = cmd.Process.Release()
		return false, nil
	}
	if rerr != nil && line == "" {
		st, _ := cmd.Process.Wait()
		return false, fmt.Errorf("daemon exited before mounting (%v); see %s", st, logPath)
	}
	return false, errors.New(strings.TrimPrefix(line, "err "))
}

// notifyReady tells a waiting daemonize parent that the mount is up (err
// nil) or failed. It is a no-op in the foreground.
func notifyReady(err error) {
	if os.Getenv(daemonEnv) != "1" {
		return
	}
	f := os.NewFile(3, "ready")
	if f == nil {
		return
	}
	if err != nil {
		fmt.Fprintf(f, "err %v\n", err)
	} else {
		fmt.Fprintln(f, "ok")
	}
	f.Close()
	if err == nil {
		// Detach from the terminal's stdin for good.
		if nul, e := os.Open(os.DevNull); e == nil {
			_ = unix.Dup2(int(nul.Fd()), 0)
			nul.Close()
		}
	}
}
