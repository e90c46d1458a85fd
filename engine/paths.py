"""Where sparkcode keeps its configuration, data and logs.

``SPARKCODE_HOME`` puts everything under one directory (tests rely on this);
otherwise the platform's conventional directories are used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "sparkcode"


@dataclass(frozen=True)
class Paths:
    """The directories sparkcode reads and writes."""

    config_dir: Path
    """User configuration: ``config.toml`` and user ``profiles/*.toml``."""
    data_dir: Path
    """Converted models, sessions, undo snapshots."""
    state_dir: Path
    """The running engine's record and its logs."""

    @classmethod
    def from_env(cls) -> Paths:
        home = os.environ.get("SPARKCODE_HOME")
        if home:
            root = Path(home).expanduser().resolve()
            return cls(root / "config", root / "data", root / "state")
        return cls(
            Path(platformdirs.user_config_dir(APP_NAME)),
            Path(platformdirs.user_data_dir(APP_NAME)),
            Path(platformdirs.user_state_dir(APP_NAME)),
        )

    @property
    def profiles_dir(self) -> Path:
        return self.config_dir / "profiles"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    @property
    def engine_dir(self) -> Path:
        return self.state_dir / "engine"

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"
