"""Corpora, protocols and scoring that a study and a test share on purpose: the study runs
the full set for a doc's figure, the test a small slice in CI. Tests import these modules,
never a bench script."""
