"""A stand-in for ``ssh HOST COMMAND`` that runs COMMAND on this machine.

``SPARKCODE_SSH="python tests/support/ssh_shim.py"`` makes sparkcode's ssh transport
talk to a "remote" node here: the host is ignored and the command runs under ``sh -c``
with ``SPARKCODE_HOME`` set to ``$SPARKCODE_SHIM_HOME`` (the other box's state), so the
real ``sparkcode engine node ... --json`` protocol is exercised without an ssh server.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    command = argv[1:]  # argv[0] is the host
    env = dict(os.environ)
    env["SPARKCODE_HOME"] = env.get("SPARKCODE_SHIM_HOME", env.get("SPARKCODE_HOME", ""))
    os.execvpe("sh", ["sh", "-c", " ".join(command)], env)


if __name__ == "__main__":
    main(sys.argv[1:])
