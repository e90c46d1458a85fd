"""The agent suite's tasks, one TOML file each (format: ``sparkcode/bench/_agent_tasks.py``)."""
