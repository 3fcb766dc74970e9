#!/usr/bin/env python3
"""The examples in docs/*.md run, and show what the command prints.

An example is a code block (indented by four spaces, or fenced) whose line starts with
`$ longctx ARGS`; the lines under it, up to the next `$ ` line or the block's end, are what
it prints. Each shown line must appear in the command's standard output, in the order shown
(an example may leave lines out; a line `...` says so and is skipped). ARGS are split as a
POSIX shell would (a trailing `\\` continues the command on the next line) and run with the
longctx binary given; the exit status is not checked, the output is.

usage: doc_examples.py LONGCTX [DOC.md ...]   (default: every docs/*.md)
Exit status: 0 when every example shows what its command prints, 1 otherwise.
"""
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*```")


def code_blocks(text):
    """Each code block's lines, without their indentation."""
    block, fenced = [], False
    for line in text.splitlines() + [""]:
        if FENCE.match(line):
            if fenced:
                yield block
                block = []
            fenced = not fenced
            continue
        if fenced:
            block.append(line)
        elif line.startswith("    "):
            block.append(line[4:])
        elif block:
            yield block
            block = []


def examples(path):
    """(line number-free command text, [shown lines]) for each `$ longctx` in the file."""
    for block in code_blocks(path.read_text()):
        i = 0
        while i < len(block):
            if not block[i].startswith("$ longctx "):
                i += 1
                continue
            command = block[i][2:]
            while command.endswith("\\") and i + 1 < len(block):
                i += 1
                command = command[:-1] + " " + block[i].strip()
            shown = []
            i += 1
            while i < len(block) and not block[i].startswith("$ "):
                shown.append(block[i].rstrip())
                i += 1
            while shown and not shown[-1]:
                shown.pop()
            yield command, shown


def check(longctx, command, shown):
    """The shown lines missing from the output, in order; [] when all are there."""
    args = shlex.split(command)[1:]
    run = subprocess.run([longctx, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)
    printed = [line.rstrip() for line in run.stdout.splitlines()]
    at, missing = 0, []
    for line in shown:
        if line.strip() in ("", "..."):
            continue
        try:
            at = printed.index(line, at) + 1
        except ValueError:
            missing.append(line)
    return missing, run


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    longctx = argv[1]
    docs = [pathlib.Path(p) for p in argv[2:]] or sorted((ROOT / "docs").glob("*.md"))
    failures = count = 0
    for doc in docs:
        for command, shown in examples(doc):
            count += 1
            missing, run = check(longctx, command, shown)
            if missing:
                failures += 1
                print(f"{doc.name}: `{command}` no longer prints (in this order):", file=sys.stderr)
                for line in missing:
                    print(f"    {line}", file=sys.stderr)
                print("  it printed:", file=sys.stderr)
                for line in run.stdout.splitlines():
                    print(f"    {line}", file=sys.stderr)
    print(f"{count} doc examples, {failures} drifted")
    return 1 if failures or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
