"""Benchmarks: each compares our code with the bound it could reach, in the same run."""
