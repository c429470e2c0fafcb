"""SCIM 2.0 provisioning at /scim/v2: an identity provider creates, changes, suspends
and deletes an organization's people (Users) and teams (Groups).

`install_scim(app, config, store_key=STORE)` mounts it on the client listener.
"""

from llmgw.scim.app import install_scim

__all__ = ["install_scim"]
