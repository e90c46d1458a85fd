"""The engine side of sparkcode: profiles, supervisor, vLLM plugin, quantizer.

``engine`` may import ``kernels`` and never ``sparkcode``.
"""
