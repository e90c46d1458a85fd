"""Triton kernels for the quantized formats, each with a PyTorch reference.

This package imports neither ``engine`` nor ``sparkcode``. Kernels run on CPU
through ``TRITON_INTERPRET=1`` so tests can compare them with the references.
"""
