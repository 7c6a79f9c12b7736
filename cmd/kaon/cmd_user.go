package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(func() *cobra.Command {
		var long bool
		c := leaf("ls [-l] PATH", "list a directory: ls [-l] PATH", func(c *cobra.Command, args []string) int {
			p, ok := oneArg(c, args)
			if !ok {
				return 2
			}
			return runLs(urlOf(c), p, long)
		})
		c.Flags().BoolVarP(&long, "l", "l", false, "long listing")
		return withURL(c)
	})
	addVerb(func() *cobra.Command {
		return withURL(leaf("stat PATH", "show metadata and subtree accounting: stat PATH", func(c *cobra.Command, args []string) int {
			p, ok := oneArg(c, args)
			if !ok {
				return 2
			}
			return runStat(urlOf(c), p)
		}))
	})
	addVerb(func() *cobra.Command {
		var parents bool
		c := leaf("mkdir [-p] PATH", "create a directory: mkdir [-p] PATH", func(c *cobra.Command, args []string) int {
			p, ok := oneArg(c, args)
			if !ok {
				return 2
			}
			if err := newAPI(urlOf(c)).Mkdir(ctx(), p, 0, parents); err != nil {
				return fail("mkdir", err)
			}
			return 0
		})
		c.Flags().BoolVarP(&parents, "p", "p", false, "create parents, no error if it exists")
		return withURL(c)
	})
	addVerb(func() *cobra.Command {
		var rec bool
		c := leaf("rm [-r] PATH", "remove: rm [-r] PATH", func(c *cobra.Command, args []string) int {
			p, ok := oneArg(c, args)
			if !ok {
				return 2
			}
			if err := newAPI(urlOf(c)).Remove(ctx(), p, rec); err != nil {
				return fail("rm", err)
			}
			return 0
		})
		c.Flags().BoolVarP(&rec, "r", "r", false, "remove a directory tree")
		return withURL(c)
	})
	addVerb(func() *cobra.Command {
		var force bool
		c := leaf("mv [-f] FROM TO", "rename: mv FROM TO", func(c *cobra.Command, args []string) int {
			if len(args) != 2 {
				fmt.Fprintln(os.Stderr, "usage: kaon mv [-f] FROM TO")
				return 2
			}
			if err := newAPI(urlOf(c)).Rename(ctx(), args[0], args[1], force); err != nil {
				return fail("mv", err)
			}
			return 0
		})
		c.Flags().BoolVarP(&force, "f", "f", false, "replace an existing destination")
		return withURL(c)
	})
	addVerb(func() *cobra.Command {
		var sym bool
		c := leaf("ln -s TARGET LINK", "create a symbolic link: ln -s TARGET LINK (the target kept as written)", func(c *cobra.Command, args []string) int {
			if len(args) != 2 {
				fmt.Fprintln(os.Stderr, "usage: kaon ln -s TARGET LINK")
				return 2
			}
			if !sym {
				fmt.Fprintln(os.Stderr, "kaon ln: hard links are not supported (the namespace names each file once); use ln -s")
				return 2
			}
			if _, err := newAPI(urlOf(c)).Symlink(ctx(), args[0], args[1]); err != nil {
				return fail("ln", err)
			}
			return 0
		})
		c.Flags().BoolVarP(&sym, "s", "s", false, "make a symbolic link")
		return withURL(c)
	})
	addVerb(func() *cobra.Command {
		return withURL(leaf("cp SRC DST", "copy local<->Kaon: cp SRC DST (Kaon paths as kaon:/path)", func(c *cobra.Command, args []string) int {
			if len(args) != 2 {
				fmt.Fprintln(os.Stderr, "usage: kaon cp SRC DST   (Kaon paths are written kaon:/path)")
				return 2
			}
			return runCp(urlOf(c), args[0], args[1])
		}))
	})
	addVerb(func() *cobra.Command {
		return withURL(leaf("chmod OCTAL PATH", "change mode bits: chmod OCTAL PATH", func(c *cobra.Command, args []string) int {
			mode, p, ok := twoArgs(args, "chmod OCTAL PATH")
			if !ok {
				return 2
			}
			m, err := strconv.ParseUint(mode, 8, 32)
			if err != nil || m > 0o7777 {
				return fail("chmod", fmt.Errorf("%s: bad mode %q (octal)", p, mode))
			}
			if err := newAPI(urlOf(c)).Chmod(ctx(), p, uint32(m)); err != nil {
				return fail("chmod", err)
			}
			return 0
		}))
	})
	addVerb(func() *cobra.Command {
		return withURL(leaf("chown UID:GID PATH", "change owner (root): chown UID:GID PATH", func(c *cobra.Command, args []string) int {
			owner, p, ok := twoArgs(args, "chown UID:GID PATH")
			if !ok {
				return 2
			}
			uid, gid, found := strings.Cut(owner, ":")
			if !found {
				return fail("chown", fmt.Errorf("want UID:GID, got %q", owner))
			}
			uidN, err1 := strconv.ParseUint(uid, 10, 32)
			gidN, err2 := strconv.ParseUint(gid, 10, 32)
			if err1 != nil || err2 != nil {
				return fail("chown", fmt.Errorf("%s: uid and gid must be numbers", p))
			}
			if err := newAPI(urlOf(c)).Chown(ctx(), p, uint32(uidN), uint32(gidN)); err != nil {
				return fail("chown", err)
			}
			return 0
		}))
	})
}

func twoArgs(args []string, usage string) (string, string, bool) {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kaon "+usage)
		return "", "", false
	}
	return args[0], args[1], true
}

// oneArg is the one argument (a path) of c.
func oneArg(c *cobra.Command, args []string) (string, bool) {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "usage: %s [flags] PATH\n", c.CommandPath())
		return "", false
	}
	return args[0], true
}

func modeString(e nsapi.Entry) string {
	s := []byte("-rwxrwxrwx")
	switch {
	case e.IsDir:
		s[0] = 'd'
	case e.IsLink():
		s[0] = 'l'
	}
	for i := 0; i < 9; i++ {
		if e.Mode&(1<<(8-i)) == 0 {
			s[i+1] = '-'
		}
	}
	return string(s)
}

func runLs(u server, p string, long bool) int {
	ents, err := newAPI(u).List(ctx(), p)
	if err != nil {
		return fail("ls", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', tabwriter.AlignRight)
	for _, e := range ents {
		name := e.Name
		if e.IsDir {
			name += "/"
		}
		if long && e.IsLink() {
			name += " -> " + e.Target
		}
		if long {
			fmt.Fprintf(tw, "%s\t %d\t %d\t %d\t %s\t %s\t\n", modeString(e), e.UID, e.GID, e.Size, e.MTime.Format("Jan 02 15:04"), name)
		} else {
			fmt.Println(name)
		}
	}
	tw.Flush()
	return 0
}

func runStat(u server, p string) int {
	e, err := newAPI(u).Stat(ctx(), p)
	if err != nil {
		return fail("stat", err)
	}
	kind := "file"
	switch {
	case e.IsDir:
		kind = "directory"
	case e.IsLink():
		kind = "symbolic link -> " + e.Target
	}
	fmt.Printf("  Path: %s\n  Type: %s\n    ID: %d\n  Mode: %04o (%s)  Uid: %d  Gid: %d\n  Size: %d\n Mtime: %s\n Ctime: %s\n Btime: %s\n",
		e.Path, kind, e.ID, e.Mode, modeString(e), e.UID, e.GID, e.Size,
		e.MTime.Format(time.RFC3339Nano), e.CTime.Format(time.RFC3339Nano), e.BTime.Format(time.RFC3339Nano))
	if e.IsDir {
		fmt.Printf("  Tree: %d bytes, %d files, %d directories, latest change %s\n", e.TreeSize, e.TreeFiles, e.TreeDirs, e.TreeMTime.Format(time.RFC3339Nano))
	} else if !e.IsLink() {
		fmt.Printf("Layout: %s\n", e.Layout)
		for _, t := range checksum.SortedTypes(e.Checksums) {
			fmt.Printf("  %s: %s\n", t, e.Checksums[t])
		}
	}
	return 0
}

// progress draws a one-line progress bar on stderr when it is a terminal.
type progress struct {
	total, done int64
	start, last time.Time
	tty         bool
	name        string
}

func newProgress(name string, total int64) *progress {
	st, _ := os.Stderr.Stat()
	return &progress{name: name, total: total, start: time.Now(), tty: st != nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if p.tty && time.Since(p.last) > 200*time.Millisecond {
		p.last = time.Now()
		p.draw()
	}
	return len(b), nil
}

func (p *progress) draw() {
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	bar := strings.Repeat("#", int(frac*30)) + strings.Repeat(".", 30-int(frac*30))
	rate := float64(p.done) / time.Since(p.start).Seconds() / (1 << 20)
	fmt.Fprintf(os.Stderr, "\r%s [%s] %3.0f%% %.1f MiB/s", p.name, bar, frac*100, rate)
}

func (p *progress) finish() {
	if p.tty {
		p.draw()
		fmt.Fprintln(os.Stderr)
	}
}

func runCp(u server, src, dst string) int {
	api := newAPI(u)
	srcRemote, dstRemote := strings.HasPrefix(src, "kaon:"), strings.HasPrefix(dst, "kaon:")
	switch {
	case !srcRemote && dstRemote:
		f, err := os.Open(src)
		if err != nil {
			return fail("cp", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fail("cp", err)
		}
		if st.IsDir() {
			return fail("cp", fmt.Errorf("%s: is a directory", src))
		}
		dpath := strings.TrimPrefix(dst, "kaon:")
		if strings.HasSuffix(dpath, "/") {
			dpath += st.Name()
		}
		pr := newProgress(src, st.Size())
		if err := api.Put(ctx(), dpath, io.TeeReader(f, pr), st.Size()); err != nil {
			return fail("cp", err)
		}
		pr.finish()
	case srcRemote && !dstRemote:
		spath := strings.TrimPrefix(src, "kaon:")
		body, size, err := api.Get(ctx(), spath)
		if err != nil {
			return fail("cp", err)
		}
		defer body.Close()
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = strings.TrimRight(dst, "/") + "/" + spath[strings.LastIndexByte(spath, '/')+1:]
		}
		out, err := os.Create(dst)
		if err != nil {
			return fail("cp", err)
		}
		pr := newProgress(spath, size)
		if _, err := io.Copy(io.MultiWriter(out, pr), body); err != nil {
			out.Close()
			os.Remove(dst)
			return fail("cp", err)
		}
		pr.finish()
		if err := out.Close(); err != nil {
			return fail("cp", err)
		}
	default:
		return fail("cp", fmt.Errorf("exactly one of SRC and DST must be a Kaon path (kaon:/...)"))
	}
	return 0
}
