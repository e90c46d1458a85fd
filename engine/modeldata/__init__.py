"""Data shipped with the builtin models: wheel pins, licenses, chat templates.

Read with :func:`importlib.resources.files`; nothing here is code.
"""
