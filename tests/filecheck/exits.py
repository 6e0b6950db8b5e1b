#!/usr/bin/env python3
# exits.py N COMMAND...: runs COMMAND and succeeds only when it exits with
# status N (the FileCheck tests' %exits). COMMAND writes to this program's
# standard output directly; its standard error is held back and written to
# this program's standard error once COMMAND has exited, so that a test that
# reads both (2>&1) sees the standard output first, however COMMAND buffers.
# exits.py N --close-stdout COMMAND...: the same with COMMAND's standard
# output closed (lit's shell has no `>&-`).
import os
import subprocess
import sys


def main(argv):
    if len(argv) < 3 or not argv[1].lstrip('-').isdigit():
        sys.stderr.write('usage: exits.py N COMMAND...\n')
        return 2
    expected = int(argv[1])
    command = argv[2:]
    close_stdout = command[0] == '--close-stdout'
    if close_stdout:
        command = command[1:]
    sys.stdout.flush()
    proc = subprocess.run(command, stderr=subprocess.PIPE,
                          preexec_fn=(lambda: os.close(1)) if close_stdout
                          else None)
    sys.stderr.buffer.write(proc.stderr)
    if proc.returncode != expected:
        # A negative status is a signal: a crash never passes.
        sys.stderr.write('exits.py: %s exited %d, expected %d\n' %
                         (' '.join(command), proc.returncode, expected))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
