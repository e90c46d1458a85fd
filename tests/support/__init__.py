"""Shared test helpers: tiny local models and a real vLLM engine fixture."""
