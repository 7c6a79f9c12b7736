package main

import "testing"

// TestMountWritebackDefault: the kernel's write-back cache is on unless
// turned off (--writeback=false or -o nowriteback); -o writeback is
// taken.
func TestMountWritebackDefault(t *testing.T) {
	c := newMountCmd()
	if err := c.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Flags().GetBool("writeback"); !v {
		t.Fatal("kaon mount: write-back is off by default")
	}
	if err := c.ParseFlags([]string{"--writeback=false"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Flags().GetBool("writeback"); v {
		t.Fatal("--writeback=false leaves write-back on")
	}
	for opts, want := range map[string]bool{"nowriteback": false, "writeback": true} {
		o := mountOptions{writeback: !want, direct: "auto", options: []string{"_netdev", opts}}
		if err := o.parseOptions(); err != nil {
			t.Fatalf("-o %s: %v", opts, err)
		}
		if o.writeback != want {
			t.Errorf("-o %s: write-back %v, want %v", opts, o.writeback, want)
		}
	}
}
