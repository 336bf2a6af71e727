"""The `ferry` command of an installed package: the console entry point runs the
command built with the package (ferry/_bin/ferry), the same program as the
project's build makes, with the same arguments. Also `python -m ferry`."""
import os
import sys


def path():
    """Where the package's `ferry` command is."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "ferry")


def main(argv=None):
    exe = path()
    args = sys.argv[1:] if argv is None else list(argv)
    if not os.access(exe, os.X_OK):
        sys.stderr.write("ferry: the command was not built with this package (%s is missing); "
                         "reinstall it with pip\n" % exe)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["ferry"] + args)


if __name__ == "__main__":
    sys.exit(main())
