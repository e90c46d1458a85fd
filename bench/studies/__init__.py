"""Studies behind figures in the docs (which detector, which calibration, which scale dtype,
can a small model drive the tools): each prints the table a doc section quotes. They inform
decisions; the product promises no number from them. ``bench/README.md`` maps each to its
doc section."""
