"""Static check of every Triton kernel in ``kernels/``: compiled for sm_121 (GB10) and sm_90
(H100/H200) on a CPU, its machine code read for registers, spills, occupancy, load widths
and a roofline of the hot loop. Run: ``python -m bench.targets.kernel_static`` (see ``__main__``).
"""
