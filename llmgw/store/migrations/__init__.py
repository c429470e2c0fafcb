"""Schema migrations, one folder of numbered SQL files per dialect (resources, read with importlib.resources)."""
