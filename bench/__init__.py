"""Measurements outside the product, by kind (``bench/README.md`` maps each to its doc).

``targets/`` the numbers the product promises, each printed beside its baseline in one run;
``studies/`` the studies behind figures in the docs; ``corpora/`` the corpora and protocols a
study and a test share on purpose; ``codegen/`` tools that write checked-in code. Run each
from the repository root with ``python -m bench.<kind>.<name>``.
"""
