"""What a user or project adds to the agent: MCP servers' tools, skills, project
instructions (``AGENTS.md`` and the like) and hooks run at named points of a turn.

Each is optional and read from the workspace or the settings; the conversation in
``core/`` asks them for tools, prompt text or a hook's verdict and knows nothing else.
"""
