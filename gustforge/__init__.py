"""GUST Forge cross-cutting package: errors, registries, hashing, the LLM client and the sandbox.

Stage code lives in the top-level packages `envgen`, `tdg`, `trainer`; domain models in `data`.
"""

__version__ = "0.1.0"
