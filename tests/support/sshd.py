"""A real OpenSSH server on loopback, for the ssh node transport's tests.

The worker node of a two-Spark engine is driven with ``ssh HOST sparkcode engine node
VERB --json``; a stand-in for ssh (ssh_shim.py) proves our protocol, this proves the
parts only a real ssh has: the remote command re-split by the login shell, the clean
environment sshd gives it, and a ``node start`` whose detached engine must not hold the
session open (ssh waits for every holder of the session's stdout and stderr).

sshd runs in the foreground as this user on a free port with its own host key and an
authorized key made for the test; nothing outside the temporary folder is touched but
``/run/sshd``, which sshd needs when started as root. Debian's package is
``openssh-server``; ``.ci/run`` installs it.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.engine import free_port


@dataclass(frozen=True)
class Sshd:
    host: str
    """``user@127.0.0.1``: what a profile's ``[nodes.worker] ssh`` would hold."""
    ssh: str
    """The client command (``SPARKCODE_SSH``): the test's key, no known_hosts, batch mode."""


def _binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )


@contextmanager
def running_sshd(folder: Path) -> Iterator[Sshd]:
    """sshd on 127.0.0.1 for as long as the block runs; skips where OpenSSH is missing."""
    sshd, ssh, keygen = _binary("sshd"), _binary("ssh"), _binary("ssh-keygen")
    if not (sshd and ssh and keygen):
        pytest.skip(
            "OpenSSH (sshd, ssh, ssh-keygen) is not installed: Debian's "
            "openssh-server and openssh-client (.ci/run installs them)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    host_key, user_key = folder / "host_ed25519", folder / "user_ed25519"
    for key in (host_key, user_key):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = folder / "authorized_keys"
    authorized.write_text(user_key.with_suffix(".pub").read_text())
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
AuthorizedKeysFile {authorized}
PidFile {folder / "sshd.pid"}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
""")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation
    log = (folder / "sshd.log").open("wb")
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "sshd did not start: " + (folder / "sshd.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.1)
        client = shlex.join(
            [
                ssh,
                "-F",
                "/dev/null",
                "-i",
                str(user_key),
                "-p",
                str(port),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
            ]
        )
        yield Sshd(host=f"{getpass.getuser()}@127.0.0.1", ssh=client)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
