"""`llmgw server kube`: the control plane and its store as Kubernetes manifests; the nodes stay outside.

- `options`: what the operator chose, every choice checked before anything is made;
- `material`: the secrets (the cluster CA, the server certificate, the admin
  token, the key-hash secret, the store's address), made by the code
  `llmgw server init` uses;
- `manifests`: the resources, as plain mappings;
- `output`: the files under --out (secrets 0600), and the Dockerfile.
"""

from llmgw.install.kubernetes.options import KubeError, KubeOptions, check_options

__all__ = ["KubeError", "KubeOptions", "check_options"]
