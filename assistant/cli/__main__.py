"""`python -m assistant.cli`: the `assistant` command without its installed script."""

import sys

from assistant.cli import main

sys.exit(main())
