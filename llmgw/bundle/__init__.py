"""Offline bundles: what a site with no internet needs, carried in as one signed archive.

- `manifest`: the archive's layout and its manifest (every file's sha256 and size).
- `create`: `llmgw bundle create`: a release, engine sources and wheels, model versions.
- `importer`: `llmgw bundle import`: every file checked before any is written, then into a mirror.
- `offline_settings`: server.yaml's `mirror.offline`, checked with the rest of the file.
"""
