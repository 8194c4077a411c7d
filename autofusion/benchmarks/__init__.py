"""Benchmarks for autofusion: run by hand or on request, never by the test suite."""
