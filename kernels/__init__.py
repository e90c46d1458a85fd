"""Triton kernels for the quantized formats, each with a PyTorch reference.

This package imports neither ``engine`` nor ``sparkcode``. Kernels run on CPU
through ``TRITON_INTERPRET=1`` so tests can compare them with the references.

Modules:

- ``w2_layout`` / ``p12_layout``: the bit layouts of W2 (2-bit experts) and P12 (lossless
  12-bit BF16), defined once, with the PyTorch reference decoders the engine also uses.
- ``w2_dequant``: W2 -> bf16 matrix, and the decode GEMV ``y = x @ W.T`` from packed codes.
- ``p12_unpack``: P12 -> bf16 tensor.
- ``p12_gemv``: decode GEMV from P12 weights (decoded in registers, sparse escape fix-up).
- ``nvfp4_layout`` / ``nvfp4_dequant``: the FP4 hot-pool layout, reference and kernel.
- ``w2_moe``: the fused MoE (gate+up, down, top-k sum) with its tiles; ``w2_moe_tiles``: how
  its weight tiles are read and decoded; ``w2_moe_layout``: its weights and reference;
  ``moe_align``: routing alignment for its prefill path.
- ``_triton``: optional Triton import and where the kernels can run.
"""
