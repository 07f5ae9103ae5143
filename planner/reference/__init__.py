"""Coppelius as plain PyTorch: the reference and the benchmarks' anchor."""
