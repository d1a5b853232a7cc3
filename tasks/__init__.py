"""Prefect tasks: thin wrappers (load → one library call → return) around the stage packages' stage functions,
and the stage table (`tasks.stage_table`) that composes them."""
