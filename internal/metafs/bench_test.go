package metafs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchTree is one 16x16 slice of the study's tree (273 dirs, 17 files each).
func benchTree(b *testing.B) (string, string) {
	b.Helper()
	root := filepath.Join(b.TempDir(), "tree")
	for i := 0; i < 16; i++ {
		for j := 0; j < 16; j++ {
			d := filepath.Join(root, fmt.Sprintf("d%02d/d%02d", i, j))
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
			for k := 0; k < 17; k++ {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("mod%d.py", k)), nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	file := filepath.Join(b.TempDir(), "idx")
	x, err := Build(root, BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := x.WriteFile(file); err != nil {
		b.Fatal(err)
	}
	return root, file
}

func BenchmarkBuild(b *testing.B) {
	root, _ := benchTree(b)
	for b.Loop() {
		if _, err := Build(root, BuildOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoad(b *testing.B) {
	_, file := benchTree(b)
	for b.Loop() {
		if _, err := Load(file); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolveHitAndMiss(b *testing.B) {
	_, file := benchTree(b)
	x, err := Load(file)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, ok := x.Resolve("d07/d11/mod9.py"); !ok {
			b.Fatal("miss")
		}
		if _, ok := x.Resolve("d07/d11/libnope.so"); ok {
			b.Fatal("hit")
		}
	}
}
