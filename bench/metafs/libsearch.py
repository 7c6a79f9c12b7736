#!/usr/bin/env python3
"""Library-search pass, as dynamic loaders and interpreters do it.

For each module name, walk a search path of 12 directories of the synthetic
tree and probe NAME.so, NAME.py (stat) and NAME/__init__.py (open); stop at
the first hit, then open it and read its first 4 KiB. The module list holds
36 modules that exist (3 in each search-path directory, so earlier
directories miss first) and 300 that exist nowhere, so most probes fail.

usage: libsearch.py ROOT
"""
import os
import sys

FAN, FILES = 16, 17


def bfs_index(path_parts):
    # directory k in gentree.py's breadth-first order for d<a>/d<b>/d<c>
    a, b, c = path_parts
    return 16 + 256 + (a * 256 + b * 16 + c)


def main():
    root = sys.argv[1]
    leaves = [(i, (i * 7) % 16, (i * 5 + 3) % 16) for i in range(12)]
    path = [os.path.join(root, "d%02d/d%02d/d%02d" % p) for p in leaves]
    mods = []
    for p in leaves:
        k = bfs_index(p)
        mods += ["mod%d" % (k * FILES + j) for j in (1, 9, 16)]
    mods += ["nomod%d" % i for i in range(300)]
    found = probes = 0
    for m in mods:
        hit = None
        for d in path:
            for suffix in (".so", ".py"):
                probes += 1
                try:
                    os.stat(os.path.join(d, m + suffix))
                    hit = os.path.join(d, m + suffix)
                    break
                except FileNotFoundError:
                    pass
            if hit:
                break
            probes += 1
            try:
                os.close(os.open(os.path.join(d, m, "__init__.py"), os.O_RDONLY))
            except (FileNotFoundError, NotADirectoryError):
                pass
        if hit:
            fd = os.open(hit, os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)
            found += 1
    print("libsearch: %d modules, %d found, %d probes" % (len(mods), found, probes))


if __name__ == "__main__":
    main()
