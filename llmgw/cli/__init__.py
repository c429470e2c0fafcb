"""The `llmgw` command: one argparse tree, one module per command group."""
