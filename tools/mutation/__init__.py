"""Mutation check: break one rule of fxslots at a time and see which tests notice.

``python3 tools/mutation/run.py`` (see docs/reliability.md); the mutants are in ``mutants.py``.
"""
