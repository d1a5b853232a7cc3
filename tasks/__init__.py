"""Prefect tasks: thin wrappers (load → one library call → return) around `gustforge.pipeline`."""
