"""The data sets `tests/support/fuzz_data.py` changes: one module per group of datamodules, each with `CASES`."""
