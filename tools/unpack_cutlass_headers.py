#!/usr/bin/env python3
"""Unpacks CUTLASS's C++ headers from PyPI's nvidia-cutlass wheel: its cutlass_library/source/include/ folder (cute/,
cutlass/) goes to DEST/include/. Nothing is installed; tools/bench/cutlass_probe includes DEST/include.

    tools/unpack_cutlass_headers.py WHEEL DEST
"""
import os
import shutil
import sys
import zipfile

PREFIX = "cutlass_library/source/include/"


def main() -> int:
    wheel, dest = sys.argv[1], sys.argv[2]
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    count = 0
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.startswith(PREFIX) or name.endswith("/"):
                continue
            path = os.path.join(tmp, "include", name[len(PREFIX):])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(z.read(name))
            count += 1
    if count == 0 or not os.path.exists(os.path.join(tmp, "include", "cutlass", "cutlass.h")):
        print(f"unpack_cutlass_headers: no CUTLASS headers in {wheel}", file=sys.stderr)
        return 1
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    print(f"unpack_cutlass_headers: {count} headers from {os.path.basename(wheel)} into {dest}/include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
