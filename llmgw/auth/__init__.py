"""Who is asking: API keys, principals, passwords, sessions."""
