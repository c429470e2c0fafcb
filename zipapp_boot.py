# -*- coding: utf-8 -*-
"""The start of llmgw's one file (build.py packs this as its __main__.py).

It checks that this Python and this machine are ones the file holds compiled
packages for, unpacks the pure-Python part and this Python's part once (into
$SHIV_ROOT, else ~/.shiv, else a private directory under the temporary one),
puts them first on sys.path and runs `llmgw`. Anything else gets one line
saying what the file runs on, and exit status 2.

Only syntax and modules that Python 3.6 has: an old python3 must be able to
read this far to say so.
"""

import os
import sys

# build.py replaces this line with what it packed.
BUILD = {"version": "source", "id": "source", "pythons": ["3.10", "3.11", "3.12", "3.13"], "arch": "x86_64"}

# What platform.machine() says on some systems, in the names the file uses.
MACHINE_NAMES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "aarch64_be": "aarch64_be"}


def supported(build):
    """'CPython 3.10 to 3.13 on Linux x86_64': what a file of this build runs on."""
    pythons = build["pythons"]
    if len(pythons) == 1:
        which = pythons[0]
    else:
        which = "%s to %s" % (pythons[0], pythons[-1])
    return "CPython %s on Linux %s" % (which, build["arch"])


def choose(build, version_info, implementation, system, machine):
    """The part of the file for this Python ('cp312') and None, or None and the one line that refuses it."""
    arch = MACHINE_NAMES.get(machine.lower(), machine.lower())
    version = "%d.%d" % (version_info[0], version_info[1])
    if implementation == "cpython" and system.startswith("linux") and arch == build["arch"] \
            and version in build["pythons"]:
        return "cp" + version.replace(".", ""), None
    names = {"cpython": "CPython", "pypy": "PyPy"}
    here = "%s %d.%d.%d on %s %s" % (names.get(implementation, implementation), version_info[0], version_info[1],
                                     version_info[2], "Linux" if system.startswith("linux") else system, machine)
    hint = "run it with a supported python3 (python3.12 llmgw.pyz)"
    if system.startswith("linux") and arch != build["arch"] and arch in ("x86_64", "aarch64"):
        hint = "use llmgw-%s-linux-%s.pyz (python3 build.py --arch %s)" % (build["version"], arch, arch)
    elif not system.startswith("linux"):
        hint = "run it on Linux"
    return None, "llmgw %s: this file runs on %s, not on %s; %s" % (build["version"], supported(build), here, hint)


def _writable(path):
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".llmgw-write-test-%d" % os.getpid())
        with open(probe, "w"):
            pass
        os.unlink(probe)
        return True
    except OSError:
        return False


def _private_dir(path):
    # A shared /tmp: the directory must be ours and closed to others.
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SystemExit("llmgw: %s is not a private directory of this user; set SHIV_ROOT" % path)
    return path


def unpack_root():
    """Where the file unpacks: $SHIV_ROOT, else ~/.shiv, else a private directory in the temporary one."""
    root = os.environ.get("SHIV_ROOT")
    if root:
        return root
    import tempfile

    home = os.environ.get("HOME")
    default = os.path.join(home, ".shiv") if home else None
    if default and _writable(default):
        return default
    root = _private_dir(os.path.join(tempfile.gettempdir(), "llmgw-%d" % os.getuid()))
    sys.stderr.write("llmgw: HOME is not writable; unpacking to %s (set SHIV_ROOT to choose)\n" % root)
    return root


def unpack(archive, base, part):
    """payload/<part>.zip of the archive, unpacked once into base/<part>; the directory."""
    dest = os.path.join(base, part)
    if os.path.isdir(dest):
        return dest
    import shutil
    import tempfile
    import zipfile

    os.makedirs(base, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".unpacking-%s-" % part, dir=base)
    try:
        inner = os.path.join(work, "part.zip")
        with zipfile.ZipFile(archive) as outer, outer.open("payload/%s.zip" % part) as src, open(inner, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        tree = os.path.join(work, "tree")
        with zipfile.ZipFile(inner) as z:
            z.extractall(tree)
        try:
            os.rename(tree, dest)
        except OSError:  # another llmgw started from this file got there first
            if not os.path.isdir(dest):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def bootstrap():
    import platform

    part, refusal = choose(BUILD, sys.version_info, platform.python_implementation().lower(), sys.platform,
                           platform.machine())
    if refusal:
        sys.stderr.write(refusal + "\n")
        sys.exit(2)
    archive = os.path.abspath(sys.argv[0])
    os.environ.setdefault("LLMGW_PYZ", archive)
    base = os.path.join(unpack_root(), "llmgw-%s-%s" % (BUILD["version"], BUILD["id"]))
    dirs = [unpack(archive, base, part), unpack(archive, base, "common")]
    os.environ["LLMGW_UNPACKED"] = base
    import site

    before = [p for p in sys.path if os.path.abspath(p or ".") != archive]
    for d in dirs:
        site.addsitedir(d)  # reads the .pth files some packages install
    ours = [p for p in sys.path if p not in before and os.path.abspath(p or ".") != archive]
    sys.path[:] = ours + before
    from llmgw.cli.main import main

    sys.exit(main())


if __name__ == "__main__":
    bootstrap()
