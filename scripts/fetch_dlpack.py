#!/usr/bin/env python3
"""Fetches DLPack's C header (dlpack/dlpack.h, DLPack >= 1.0) into ROOT/include.

The header comes from a pinned PyPI wheel that ships it (apache-tvm-ffi), checked against its
sha256; only that one file is extracted. Usage: fetch_dlpack.py ROOT
"""
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile

WHEEL = "apache_tvm_ffi-0.1.15.post2-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
SHA256 = "8ecebe749834f6ac0f2693d5964acf9ac75d0bc26e6ba64c46eb7ab00ea50fac"
MEMBER = "tvm_ffi/include/dlpack/dlpack.h"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        # The wheel is platform-specific but the header in it is not: pin one exact file.
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
               "--platform", "manylinux_2_28_x86_64", "apache-tvm-ffi==0.1.15.post2", "-d", tmp]
        if subprocess.run(cmd).returncode != 0:
            print("fetch_dlpack: pip download failed", file=sys.stderr)
            return 1
        wheel = pathlib.Path(tmp) / WHEEL
        if not wheel.is_file():
            print(f"fetch_dlpack: expected {WHEEL}", file=sys.stderr)
            return 1
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            print(f"fetch_dlpack: {WHEEL} has sha256 {digest}, expected {SHA256}", file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheel) as z:
            text = z.read(MEMBER)
    out = root / "include" / "dlpack" / "dlpack.h"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(text)
    print(f"fetch_dlpack: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
