"""The mirror: model files fetched once for the whole cluster.

- `layout`: `<model>/<version>/<files>` on disk, the `.source.json` sidecar,
  locks shared between processes.
- `safefetch`: an HTTP client that will not be pointed inside the network.
- `download`: one file, resumed, checked against size and sha256, moved
  into place whole.
- `registry`: a Hugging Face-shaped registry (revisions, files, search).
- `fetch`: `mirror add` (a registry repository or a URL), one download per
  file however many ask.
- `ops`: list, unused, remove, verify, update checks; the catalog's "use".
- `importer`: a local file or an Ollama model into the layout.
- `serve`: the file server and the mTLS API.
- `client`: what an agent's weights fetcher uses to read from a mirror.
"""
