import sys

from llmgw.cli.main import main

sys.exit(main())
