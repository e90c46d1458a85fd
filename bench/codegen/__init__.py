"""Tools that write checked-in code: rerun one when its inputs change, and commit the
output (``python -m bench.codegen.salad_table [--check]``)."""
