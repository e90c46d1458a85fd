"""Talking to the engine: the chat-completions wire types, the streaming client and
its parser, the stream-silence limit, sampling defaults and the engine's metrics.

Nothing here knows about tools being run or a conversation being kept: a request goes
out, a stream of deltas comes back (``client.py``, ``_stream.py``), and the typed
errors say why one did not (``chat_types.py``). ``core/`` builds the requests.
"""
