"""The web portal on the client listener: landing page, sign-up and sign-in,
the account (projects, limits, spend, keys, "connect your editor"), a chat
page, /admin for staff, and the manual at /docs, in English and Turkish.

`install_portal(app, config, store_key=...)` mounts it on the gateway's
application; docs/portal.md is the operator's and user's side.
"""

from llmgw.web.app import install_portal

__all__ = ["install_portal"]
