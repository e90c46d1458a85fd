"""The numbers the product promises: each bench prints its figure beside a baseline measured
in the same run (a ratio) and PASS/FAIL against its target. ``bench/README.md`` lists them."""
