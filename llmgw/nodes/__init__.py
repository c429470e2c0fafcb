"""Adding machines as nodes: `llmgw join CODE` on the machine, `llmgw node add [user@]host` over SSH."""
