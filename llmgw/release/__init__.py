"""Signed releases: what a cluster installs only when a key it trusts signed it.

- `keys`: Ed25519 release keys: making a pair, reading them, the short key id.
- `checksums`: the SHA256SUMS file naming every artifact of a release, and
  the detached signature beside it (SHA256SUMS.sig); also used for any signed
  list of files (an offline bundle's manifest is signed the same way).
- `trust`: the set of keys a cluster trusts (server.yaml's `releases`, the
  keys built into this file, `--trust`) less the revoked ones.
- `verify`: `verify_release(directory, trust)`: the verified files, or
  `ReleaseRefused` saying every reason in words. `ctl upgrade` and
  `mirror release add` call it.
- `store`: a verified release copied into a mirror (`_llmgw/releases/`).
"""
