"""Benchmarks (``graphfeed bench <name>``). Each writes JSON plus a markdown table with
ratios against in-process DGL measured in the same run; timings never live in tests."""
