"""The style sheets an app loads: the app's own and every widget's, found, not listed.

Each widget's styles live beside it (``widgets/NAME.tcss``); screens load their
own ``CSS_PATH``. Both apps (the TUI and the standalone replay player) use
:data:`APP_CSS`, so a new widget's sheet is picked up by both.
"""

from __future__ import annotations

from pathlib import Path, PurePath

TUI_DIR = Path(__file__).parent

APP_CSS: list[str | PurePath] = [
    TUI_DIR / "app.tcss",
    *sorted((TUI_DIR / "widgets").glob("*.tcss")),
]
