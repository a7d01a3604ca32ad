"""``python -m attn_utils.grading``: the command ``attn-grade``."""

import sys

from .cli import main

sys.exit(main())
