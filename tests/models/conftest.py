"""The timm suite's helpers (``timm_import``, ``timm_suite``) import as modules."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
