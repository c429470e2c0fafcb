"""Helpers shared by the test suite and by `llmgw up`: small real things to run against.

Nothing here is on a serving path; a module may need a test-only package
(`gguf`, from the `test` extra) and says so when it is missing.
"""
