#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Every relative link in the repository's Markdown resolves.

One TAP result per tracked *.md file (git ls-files, else a walk of the
tree): each [text](target) that is not a URL must name a file or folder of
the repository, and a #fragment must name a heading of the target (GitHub's
anchors: lower case, punctuation dropped, spaces to hyphens, -1, -2 for
repeats).  Links inside code (fenced blocks, `spans`) are not links, and
a fence left open (which would hide the rest of the file) is an error.  A
link may not leave the repository, and no file outside tests/ may name
../shared at all (only the tests load the engines' interface files from
there): the docs must read the same in any clone.

Usage: doc_links_test.py [ROOT]   (default: the repository holding this file)
"""

import os
import re
import subprocess
import sys

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached",
                              "--others", "--exclude-standard", "*.md"],
                             check=True, capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, subdirs, names in os.walk(root):
            subdirs[:] = [s for s in subdirs if s not in (".git", "build")]
            files += [os.path.relpath(os.path.join(d, n), root)
                      for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def unclosed_fence(text):
    """The line of a code fence that is never closed, or 0."""
    opened = 0
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            opened = 0 if opened else n
    return opened


def prose_lines(text):
    """(line number, line) outside fenced code, inline code blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        yield n, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links: their text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            fenced = False
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else HEADING.match(line)
                if not m:
                    continue
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else "%s-%d" % (s, k))
        _anchors[path] = found
    return _anchors[path]


def check_file(root, rel):
    """The list of what is wrong with the links of one file."""
    errors = []
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    real_root = os.path.realpath(root)
    fence = unclosed_fence(text)
    if fence:
        # Everything after it would be code: its links would go unchecked.
        errors.append("%s:%d: code fence never closed" % (rel, fence))
    for n, line in prose_lines(text):
        for m in list(LINK.finditer(line)) + list(IMAGE.finditer(line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue            # http:, https:, mailto:
            where = "%s:%d: %s" % (rel, n, target)
            file_part, _, frag = target.partition("#")
            dest = path if not file_part else os.path.normpath(
                os.path.join(os.path.dirname(path), file_part))
            if not os.path.realpath(dest).startswith(real_root + os.sep) and \
               os.path.realpath(dest) != real_root:
                errors.append(where + ": leaves the repository")
                continue
            if not os.path.exists(dest):
                errors.append(where + ": no such file")
                continue
            if frag:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    errors.append(where + ": a #fragment on a file that is not Markdown")
                elif frag not in anchors(dest):
                    errors.append(where + ": no heading '#%s' in %s"
                                  % (frag, os.path.relpath(dest, root)))
    if not rel.startswith("tests/"):
        for n, line in enumerate(text.splitlines(), 1):
            if "../shared" in line:
                errors.append("%s:%d: refers to ../shared, outside the repository"
                              % (rel, n))
    return errors


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    files = markdown_files(root)
    print("TAP version 13")
    print("1..%d" % max(len(files), 1))
    if not files:
        print("not ok 1 markdown files under %s # none found" % root)
        return 1
    failed = 0
    for i, rel in enumerate(files, 1):
        errors = check_file(root, rel)
        for e in errors:
            print("# " + e)
        print("%s %d %s" % ("not ok" if errors else "ok", i, rel))
        failed += bool(errors)
    print("# %d of %d files with broken links" % (failed, len(files)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
