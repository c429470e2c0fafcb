"""What the console shows, apart from how: the admin API client, the watched
resources, the changes an operator makes, the settings tree and the manual."""

from llmgw.console.model.actions import Actions, read_model_definition
from llmgw.console.model.api import AdminApi, AdminError, admin_token_found
from llmgw.console.model.watched import USAGE_GROUPINGS, ConsoleModel, Watched, scope_of

__all__ = [
           "USAGE_GROUPINGS",
           "Actions",
           "AdminApi",
           "AdminError",
           "ConsoleModel",
           "Watched",
           "admin_token_found",
           "read_model_definition",
           "scope_of",
]
