#!/usr/bin/env python3
"""Builds a variant of osprey for a device call without a second full build: the objects that a
patch changes are recompiled from a patched worktree with build/'s own compile commands (the
library's go into a copy of build/libosprey_lib.a), and osprey and the CUDA tests are relinked with
them; both binaries are written xz-compressed to OUT (what tests/cuda/device_env.sh's `unpack`
expects).

  python3 bench/variant_build.py PATCH|branch:NAME|- OUT [--define FILE OLD NEW ...] [--no-tests]

PATCH may be '-' (no patch: HEAD as it is, e.g. with --define only), or branch:NAME: what branch
NAME changed since it left HEAD's history (git diff from their merge base to NAME, applied with
--3way), so that a branch made before HEAD's latest merges does not undo them. --define replaces
OLD by NEW in src/FILE of the variant's tree, where OLD must occur exactly once (e.g. --define
model/gpt_oss_forward.h 'kMxfp4LtRowsPerExpert = 128' 'kMxfp4LtRowsPerExpert = 32'). A changed file
recompiles every object of osprey and of the CUDA tests (the library's and their own) whose source
it is or whose dependency list (ninja -t deps) names it. build/ must be configured and built at HEAD
first (scripts/build.sh).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, "build")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def fail(msg):
    sys.exit("variant_build: " + msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("patch")
    ap.add_argument("out")
    ap.add_argument("--define", action="append", nargs=3, default=[], metavar=("FILE", "OLD", "NEW"))
    ap.add_argument("--no-tests", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        fail("build/ is not configured: run scripts/build.sh first")
    work = tempfile.mkdtemp(prefix="osprey_variant_")
    tree = os.path.join(work, "tree")
    run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", tree, "HEAD"])
    try:
        changed = set()
        if a.patch.startswith("branch:"):
            name = a.patch[len("branch:"):]
            if not name or name.startswith("-"):
                fail(f"branch:NAME needs a branch name, got {name!r}")
            try:
                base = run(["git", "-C", ROOT, "merge-base", "HEAD", name, "--"]).strip()
            except subprocess.CalledProcessError as e:
                fail(f"no merge base of HEAD and {name!r}: {e.stderr.strip()}")
            # The patch from plumbing (git diff-tree), which no user configuration reformats.
            diff = run(["git", "-C", ROOT, "diff-tree", "-p", "--binary", "--no-color", base, name, "--"])
            if not diff.strip():
                fail(f"branch {name} changes nothing since its merge base with HEAD (already merged?)")
            patch = os.path.join(work, "branch.patch")
            with open(patch, "w") as f:
                f.write(diff)
            try:
                run(["git", "-C", tree, "apply", "--3way", patch])
            except subprocess.CalledProcessError as e:
                fail(f"branch {name}'s changes since {base[:10]} do not apply to HEAD: {e.stderr.strip()}")
        elif a.patch != "-":
            run(["git", "-C", tree, "apply", "--index", os.path.abspath(a.patch)])
        if a.patch != "-":  # staged and unstaged, new files included (both applies update the index)
            changed |= set(p for p in run(["git", "-C", tree, "diff", "--name-only", "-z", "HEAD"]).split("\0") if p)
        for rel, old, new in a.define:
            path = os.path.join(tree, "src", rel)
            text = open(path).read()
            if text.count(old) != 1:
                fail(f"--define: {old!r} occurs {text.count(old)} times in src/{rel}")
            open(path, "w").write(text.replace(old, new))
            changed.add("src/" + rel)
        targets = [("osprey", "osprey")] + ([] if a.no_tests else [("tests/osprey_cuda_tests", "tests")])
        # Every object of the binaries (library and their own) with its compile command and its
        # dependencies.
        deps = run(["ninja", "-C", BUILD, "-t", "deps"])
        obj_deps, cur = {}, None
        for line in deps.splitlines():
            if line and not line.startswith(" "):
                cur = line.split(":")[0]
                obj_deps[cur] = []
            elif line.strip() and cur:
                obj_deps[cur].append(os.path.normpath(os.path.join(BUILD, line.strip())))
        commands = {t: run(["ninja", "-C", BUILD, "-t", "commands", t]).splitlines() for t, _ in targets}
        objects = {}  # object -> (compile command, its source relative to the repository)
        for target, _ in targets:
            for cmd in commands[target]:
                m = re.search(r" -o (\S+\.o) ", cmd + " ")
                src = re.search(r" -c (\S+\.(?:cu|cpp))", cmd)
                if m and src and src.group(1).startswith(ROOT + "/"):
                    objects[m.group(1)] = (cmd, os.path.relpath(src.group(1), ROOT))
        todo = [(obj, cmd, src) for obj, (cmd, src) in objects.items()
                if src in changed or any(os.path.join(ROOT, c) in obj_deps.get(obj, []) for c in changed)]
        if not todo:
            fail("the patch and defines change no object of the binaries")
        rebuilt = {}  # object -> its rebuilt copy
        for obj, cmd, src in todo:
            out = os.path.join(work, obj.replace("/", "_"))
            c = re.sub(r" -MD -MT \S+ -MF \S+", "", cmd)
            c = re.sub(r" -o \S+\.o", " -o " + out, c)
            c = c.replace(os.path.join(ROOT, src), os.path.join(tree, src))
            c = c.replace("-I" + os.path.join(ROOT, "src"), "-I" + os.path.join(tree, "src"))
            c = c.replace("-I" + os.path.join(ROOT, "tests"), "-I" + os.path.join(tree, "tests"))
            print("variant_build: compiling", src, file=sys.stderr)
            subprocess.run(c, shell=True, check=True, cwd=BUILD)
            rebuilt[obj] = out
        # The library's members are named by their file names: each rebuilt one under its own.
        lib = os.path.join(work, "lib.a")
        shutil.copy(os.path.join(BUILD, "libosprey_lib.a"), lib)
        members_dir = os.path.join(work, "members")
        os.makedirs(members_dir)
        members = []
        for obj, out in rebuilt.items():
            if "/osprey_lib.dir/" in obj or "/osprey_cuda.dir/" in obj:
                m = os.path.join(members_dir, os.path.basename(obj))
                if os.path.exists(m):
                    fail("two changed library objects share a name; the archive cannot tell them apart")
                shutil.copy(out, m)
                members.append(m)
        if members:
            run(["ar", "r", lib] + members)
        os.makedirs(a.out, exist_ok=True)
        for target, name in targets:
            link = commands[target][-1]
            dest = os.path.join(work, name)
            link = link.replace(" libosprey_lib.a ", f" {shlex.quote(lib)} ")
            for obj, out in rebuilt.items():  # the binary's own objects
                link = link.replace(f" {obj} ", f" {shlex.quote(out)} ")
            link = re.sub(r" -o \S+ ", f" -o {shlex.quote(dest)} ", link, count=1)
            subprocess.run(link, shell=True, check=True, cwd=BUILD)
            with open(os.path.join(a.out, name + ".xz"), "wb") as f:
                subprocess.run(["xz", "-T2", "-6", "-c", dest], check=True, stdout=f)
        print(f"variant_build: {len(todo)} objects rebuilt; {', '.join(n for _, n in targets)} in {a.out}",
              file=sys.stderr)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
