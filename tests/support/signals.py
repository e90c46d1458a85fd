"""Children that are sent Ctrl-C must not inherit an ignored SIGINT.

A shell without job control starts background commands with SIGINT ignored, and a Python
started that way keeps it ignored, so a test run launched like that (``cmd &``) would see a
child shrug off the SIGINT a test sends it. Tests that send one start their child with
``preexec_fn=default_sigint``, as an interactive terminal would.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
