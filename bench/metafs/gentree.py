#!/usr/bin/env python3
"""Generate the MetaFS study's synthetic software tree.

Shape: three levels of 16-way fan-out under ROOT = 16 + 256 + 4096 = 4368
nested directories, each holding 17 files = 74 256 files. Directory k (in
breadth-first order) holds mod<k*17+j>.py (j < 8) and mod<k*17+j>.so (j >= 8),
so every module name exists exactly once in the tree; libsearch.py probes them
along a search path. File sizes are set with truncate (sparse), 0-16 KiB.

usage: gentree.py ROOT
"""
import os
import sys

FAN, DEPTH, FILES = 16, 3, 17


def dirs_bfs(root):
    level = [root]
    out = []
    for _ in range(DEPTH):
        nxt = []
        for d in level:
            for i in range(FAN):
                nxt.append(os.path.join(d, "d%02d" % i))
        out.extend(nxt)
        level = nxt
    return out


def main():
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    dirs = dirs_bfs(root)
    for d in dirs:
        os.mkdir(d)
    nfiles = 0
    for k, d in enumerate(dirs):
        for j in range(FILES):
            n = k * FILES + j
            p = os.path.join(d, "mod%d.%s" % (n, "py" if j < 8 else "so"))
            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
            os.ftruncate(fd, (n * 2654435761) % 16384)
            os.close(fd)
            nfiles += 1
    print("%s: %d directories, %d files" % (root, len(dirs), nfiles))


if __name__ == "__main__":
    main()
