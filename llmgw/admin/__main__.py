"""`python -m llmgw.admin`: print the admin API's OpenAPI document (what docs/admin-api.openapi.json holds)."""

import sys

from llmgw.admin.routes import openapi_text

sys.stdout.write(openapi_text())
