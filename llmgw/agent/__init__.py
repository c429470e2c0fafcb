"""The node agent: what a node has, what runs on it, and the weights it holds."""
